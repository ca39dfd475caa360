"""flinkpy's State Processor API: read a savepoint's state in Python, and write a new savepoint.

As Flink's State Processor API does for Java jobs, offline, with no cluster:

- :class:`SavepointReader` reads a savepoint or a retained checkpoint: keyed state by operator
  uid, state name and key; operator list, union and broadcast state;
- :class:`SavepointWriter` writes a new savepoint from an existing one (or an empty one):
  remove an operator, change an operator's uid, transform values with a Python function,
  bootstrap keyed state for a new operator from an iterable of ``(key, value)``, change the max
  parallelism. What it writes is a savepoint like any other: ``flinkpy checkpoint verify``,
  ``flinkpy savepoint plan`` and ``flinkpy run -s`` take it.

``flinkpy savepoint rewrite SRC DST --rename-uid OLD=NEW --drop-uid UID --max-parallelism N`` is
the same from the command line.

>>> import tempfile
>>> base = tempfile.mkdtemp()
>>> _ = SavepointWriter.new_savepoint().bootstrap_keyed_state("sums", "sum", [("even", 6), ("odd", 9)]).write(base + "/a")
>>> _ = SavepointWriter.from_existing_savepoint(base + "/a").change_operator_identifier("sums", "totals").write(base + "/b")
>>> SavepointReader.read(base + "/b").keyed_value("totals", "sum", "odd")
9
"""

from flinkpy.state_processor.reader import OperatorInfo, SavepointReader, StateInfo
from flinkpy.state_processor.writer import OperatorResult, RewriteResult, SavepointWriter

__all__ = ["OperatorInfo", "OperatorResult", "RewriteResult", "SavepointReader", "SavepointWriter", "StateInfo"]
