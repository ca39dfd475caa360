"""NumberSequenceSource under PyFlink's module path ``pyflink.datastream.connectors.number_seq``.

>>> from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
>>> NumberSequenceSource(1, 100)
NumberSequenceSource(1, 100)
"""

from flinkpy.connectors.number_sequence import NumberSequenceSource

__all__ = ["NumberSequenceSource"]
