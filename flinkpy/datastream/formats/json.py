"""JSON rows under PyFlink's module path ``pyflink.datastream.formats.json``.

>>> from flinkpy.common import Types
>>> schema = JsonRowSerializationSchema.builder().with_type_info(Types.ROW([Types.INT()])).build()
>>> schema.serialize((7,))
b'{"f0":7}'
"""

from flinkpy.formats.json_row import JsonRowDeserializationSchema, JsonRowSerializationSchema

__all__ = ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"]
