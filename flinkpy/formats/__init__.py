"""Row formats: records of a ``Types.ROW`` / ``Types.ROW_NAMED`` type as JSON or CSV bytes.

The schemas (:mod:`.json_row`, :mod:`.csv_row`) are imported by users from PyFlink's module
paths, ``flinkpy.datastream.formats.json`` and ``flinkpy.datastream.formats.csv``; they plug into
any connector that takes a SerializationSchema or DeserializationSchema (the Redis connectors),
and into files through ``Encoder.for_serialization_schema`` and
``StreamFormat.for_deserialization_schema``. :mod:`.fields` converts single values by type.
"""
