"""CSV rows under PyFlink's module path ``pyflink.datastream.formats.csv``.

>>> from flinkpy.common import Types
>>> schema = CsvRowSerializationSchema.Builder(Types.ROW([Types.INT(), Types.STRING()])).build()
>>> schema.serialize((7, "a"))
b'7,a\\n'
"""

from flinkpy.formats.csv_row import CsvRowDeserializationSchema, CsvRowSerializationSchema

__all__ = ["CsvRowDeserializationSchema", "CsvRowSerializationSchema"]
