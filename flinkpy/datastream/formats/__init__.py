"""Formats under PyFlink's module path ``pyflink.datastream.formats``: JSON and CSV rows.

>>> from flinkpy.datastream.formats.json import JsonRowSerializationSchema
>>> from flinkpy.datastream.formats.csv import CsvRowDeserializationSchema
"""

from flinkpy.unsupported import module_getattr as _module_getattr  # noqa: E402

#: a PyFlink name this module lacks says so, and what to use instead (flinkpy.unsupported)
__getattr__ = _module_getattr(__name__)
