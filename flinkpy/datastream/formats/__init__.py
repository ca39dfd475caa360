"""Formats under PyFlink's module path ``pyflink.datastream.formats``: JSON and CSV rows.

>>> from flinkpy.datastream.formats.json import JsonRowSerializationSchema
>>> from flinkpy.datastream.formats.csv import CsvRowDeserializationSchema
"""
