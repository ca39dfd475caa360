"""OutputTag at PyFlink's path, ``pyflink.datastream.output_tag``.

The definitions live in :mod:`flinkpy.common.output_tag`: the task and the Spark runner run them and
the state backends implement them, and those layers sit below the DataStream API (which hands
jobs to the client); see tests/test_layers.py. This module keeps a PyFlink program's import
working unchanged.
"""

from flinkpy.common.output_tag import (
    OutputTag,
)

__all__ = [
    "OutputTag",
]
