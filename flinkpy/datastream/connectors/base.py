"""PyFlink's ``pyflink.datastream.connectors.base``: the bases of sources and sinks, and
:class:`DeliveryGuarantee`.

>>> DeliveryGuarantee.EXACTLY_ONCE.value
'exactly-once'
"""

from flinkpy.connectors.base import DeliveryGuarantee, Sink, Source

__all__ = ["DeliveryGuarantee", "Sink", "Source"]
