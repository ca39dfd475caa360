"""Avro rows under PyFlink's module path ``pyflink.datastream.formats.avro`` (fastavro: the ``avro`` extra).

>>> schema = '{"type": "record", "name": "T", "fields": [{"name": "n", "type": "long"}]}'
>>> AvroRowSerializationSchema(avro_schema_string=schema).serialize((3,))
b'\\x06'
"""

from flinkpy.formats.avro_row import AvroRowDeserializationSchema, AvroRowSerializationSchema

__all__ = ["AvroRowDeserializationSchema", "AvroRowSerializationSchema"]
