"""PyFlink's ``pyflink.datastream.connectors.rabbitmq``: RMQConnectionConfig, RMQSource, RMQSink;
and RMQStreamSource, a stream queue read exactly once at any parallelism.

>>> from flinkpy.datastream.connectors.rabbitmq import RMQConnectionConfig
>>> RMQConnectionConfig.Builder().set_uri("amqp://u:p@h:5673/%2F").build().port
5673
"""

from flinkpy.connectors.rabbitmq import RMQSink, RMQSource, RMQStreamSource
from flinkpy.connectors.rabbitmq_connection import RMQConnectionConfig

__all__ = ["RMQConnectionConfig", "RMQSink", "RMQSource", "RMQStreamSource"]
