"""The verification job's sink on Spark: VerifyingSink's committed files, one per micro-batch.

On flinkpy's engine :class:`~flinkpy.connectors.verification.VerifyingSink` commits a file per
checkpoint (two-phase). On Spark the micro-batch is the unit of commit and is replayed with the
same id after a failure, so the writer names the file after the batch id
(``part-spark-<lineage>-<batch id>.jsonl``, the lineage as in :mod:`flinkpy.spark.sinks`), writes
it hidden and renames it into place: a replay rewrites the same name, and ``flinkpy verify`` reads
the same format from either runner.

>>> import tempfile
>>> from flinkpy.connectors.verification import VerifyingSink, read_committed
>>> d = tempfile.mkdtemp()
>>> w = VerifyingBatchWriter(VerifyingSink(d))
>>> w.begin(0); w.write([(0, 1, 1)], 0); w.write([(0, 1, 1)], 0); w.write([(0, 2, 2)], 1)
>>> list(read_committed(d))
[[0, 1, 1], [0, 2, 2]]
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from flinkpy.files import write_atomically
from flinkpy.spark.sinks import BatchWriter



class VerifyingBatchWriter(BatchWriter):
    guarantee = "exactly-once"

    def __init__(self, sink: Any) -> None:
        self.dir = Path(sink.directory)
        self.stem = "part-spark-"

    def bind_lineage(self, lineage: str) -> None:
        self.stem = f"part-spark-{lineage}-" if lineage else "part-spark-"

    def begin(self, batch_id: int) -> None:
        """Remove what an earlier attempt of this lineage wrote for this batch and later ones (not committed)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        part = re.compile(rf"^\.?{re.escape(self.stem)}(\d+)\.jsonl(\.inprogress)?$")
        for path in self.dir.iterdir():
            m = part.match(path.name)
            if m and int(m.group(1)) >= batch_id:
                path.unlink(missing_ok=True)

    def write(self, records: list, batch_id: int) -> None:
        if not records:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"{self.stem}{batch_id:012d}.jsonl"
        lines = "".join(json.dumps(list(r) if isinstance(r, tuple) else r) + "\n" for r in records)
        write_atomically(self.dir / name, lines, durable=True)

    def describe(self) -> str:
        return f"VerifyingSink {self.dir} (a file per batch id, renamed into place: exactly-once)"
