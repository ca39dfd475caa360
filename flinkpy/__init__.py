"""flinkpy: Apache Flink's fault-tolerance model in Python.

The engine and its PyFlink-shaped API. Import what you need from ``flinkpy.datastream`` and
``flinkpy.common``; this package itself stays light so that processes start fast.
"""

__version__ = "0.1.0"

from flinkpy import unsupported as _unsupported  # noqa: E402

# a PyFlink program that imports what flinkpy lacks ends with one line naming it, not a traceback
_unsupported.install()
