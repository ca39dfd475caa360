"""A Spark job whose driver was SIGKILLed resumes from its retained checkpoint with `run -s` (or `--from-latest`).

The worst moment to lose the driver is after a micro-batch's sink output is written and before
Spark records the batch's commit: the resumed query must run that batch again (same id, same
records) without writing its records twice, and lose none of the batches before it. The job is
test_spark_jobs' running sum per parity into a FileSink and a PostgreSQL table (a transaction
per batch, fenced by the query's name and the batch id), with a third sink after them that holds
the driver inside a chosen batch, once both have written it (a file says when), so the kill
lands there every time. The expected output is computed from the numbers.
"""

from __future__ import annotations

import json
from collections import Counter
import os
import shutil
import signal
from pathlib import Path

import psutil
import pytest

from conftest import one_error_line, run_cli, wait_for
from flinkpy.errors import ExitCode, FlinkpyError
from flinkpy.spark import restore
from test_spark_jobs import FIXED_DELAY, _check_exact, _expected, _cli_json, _committed_parts, _record, spark_env  # noqa: F401 - a fixture

HOLD_JOB = '''
import argparse
import sys
import time

from flinkpy.common import Encoder, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.file_system import FileSink
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
from flinkpy.connectors.postgres import PostgresSink


class HoldAt:
    """Written after the file sink in each batch: at its HOLD_AT-th record it writes REACHED and
    holds the batch (part file written, commit not recorded) until the driver dies."""

    def __init__(self, hold_at, reached):
        self.hold_at, self.reached, self.seen = hold_at, reached, 0

    def __call__(self, value):
        self.seen += 1
        if self.seen == self.hold_at:
            with open(self.reached, "w") as f:
                f.write(repr(value))
            while True:
                time.sleep(1)


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--hold-at", type=int, default=0)
    parser.add_argument("--reached", default="")
    parser.add_argument("--dsn", required=True)
    a = parser.parse_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    sums = (env.from_source(NumberSequenceSource(1, a.count), WatermarkStrategy.no_watermarks(), "numbers")
            .map(lambda n: ("even" if n % 2 == 0 else "odd", n)).name("parity").uid("parity")
            .key_by(lambda pair: pair[0]).sum(1).name("running sums").uid("sums"))
    sums.sink_to(FileSink.for_row_format(a.out, Encoder.simple_string_encoder()).build()).name("sums file").uid("sink")
    sums.sink_to(PostgresSink(a.dsn, "INSERT INTO sums (k, v) VALUES (%s, %s)")).name("sums table").uid("table")
    sums.add_sink(HoldAt(a.hold_at, a.reached)).name("hold").uid("hold")
    env.execute("spark sums held")


if __name__ == "__main__":
    main(sys.argv[1:])
'''


def _job(tmp: Path, count: int, per_batch: int, hold_at: int = 0) -> list[str]:
    return ["-D", f"execution.spark.max-records-per-batch={per_batch}", str(tmp / "hold_job.py"), "--count", str(count),
            "--out", str(tmp / "out"), "--hold-at", str(hold_at), "--reached", str(tmp / "reached"), "--dsn", DSN[0]]


#: the PostgreSQL server's address, set by the test (the job's arguments carry it)
DSN = [""]


def _batches(location: Path, log: str) -> list[int]:
    return sorted(int(p.name) for p in (location / log).glob("[0-9]*")) if (location / log).is_dir() else []


@pytest.mark.timeout(240)
def test_a_driver_killed_between_sink_output_and_commit_resumes_exactly_once(spark_env: Path, flinkpy_home: Path, postgres) -> None:
    count, per_batch, hold_at = 100, 25, 40  # held in batch 1 (records 26-50): batch 0 committed
    DSN[0] = postgres.dsn
    postgres.execute("CREATE TABLE sums (k text, v bigint)")
    (spark_env / "hold_job.py").write_text(HOLD_JOB)
    jid = _cli_json("run", "--json", "-d", "--runner", "spark", *FIXED_DELAY, *_job(spark_env, count, per_batch, hold_at),
                    timeout=120)["jobs"][0]["jid"]
    wait_for(lambda: (spark_env / "reached").exists(), timeout=150, interval=0.1, message="the batch to be held")
    record = _record(flinkpy_home, jid)
    location = Path(record["checkpoint_location"])
    held = max(_batches(location, "offsets"))
    assert held not in _batches(location, "commits") and _batches(location, "commits") == list(range(held)), held
    assert any(p.name.endswith(f"-{held:012d}") for p in _committed_parts(spark_env / "out")), "the held batch's part file"
    assert len(postgres.query("SELECT k, v FROM sums")) == per_batch * (held + 1), "the held batch's rows committed"

    # its driver still runs: a resume beside it (-s takes the job's directory too) is refused before anything starts
    line = one_error_line(run_cli("run", "--runner", "spark", "-s", str(location.parent), *_job(spark_env, count, 0), timeout=60),
                          ExitCode.CONFLICT)
    assert f"job {jid} still runs" in line and "savepoint" in line

    driver = psutil.Process(int(record["pid"]))
    family = driver.children(recursive=True)
    driver.send_signal(signal.SIGKILL)
    _gone, alive = psutil.wait_procs([driver, *family], timeout=60)
    assert not alive, f"left running after the driver's SIGKILL: {[p.cmdline()[:3] for p in alive]}"
    assert held not in _batches(location, "commits")

    # the dead job's checkpoint history names the location to resume, as Flink's names chk-N
    listed = _cli_json("checkpoint", "list", jid)
    assert listed["latest"]["completed"]["external_path"] == str(location)
    assert listed["latest"]["completed"]["id"] == held - 1
    text = run_cli("checkpoint", "list", jid)
    assert text.returncode == 0 and f"Latest completed: {held - 1} {location}" in text.stdout, text.stdout + text.stderr

    # what cannot be resumed, refused as the driver refuses it (without starting one)
    _refusals(spark_env, location)

    # --from-latest finds the location under the checkpoint directory (execution.checkpointing.dir)
    resumed = run_cli("run", "--runner", "spark", "--from-latest", str(location.parent.parent), "--json", *_job(spark_env, count, 0),
                      timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Restoring from {location} (Spark checkpoint {held - 1} of job {jid})" in resumed.stderr, resumed.stderr[-3000:]
    new = json.loads(resumed.stdout)["jobs"][0]
    assert new["jid"] != jid and new["state"] == "FINISHED"
    _check_exact(spark_env / "out", count)
    rows = Counter(postgres.query("SELECT k, v FROM sums"))
    assert rows == _expected(count), f"duplicates {dict(rows - _expected(count))}, missing {dict(_expected(count) - rows)}"
    restored = _cli_json("checkpoint", "list", new["jid"])["latest"]["restored"]
    assert (restored["id"], restored["external_path"], restored["is_savepoint"]) == (held - 1, str(location), False)
    # the resumed query is the killed one's lineage: the same query name its exactly-once sinks
    # fence by, the same Spark query id its part files are named after, the same batch ids
    new_location = Path(_record(flinkpy_home, new["jid"])["checkpoint_location"])
    assert (new_location / restore.QUERY_NAME_FILE).read_text() == _cli_json("job", "show", new["jid"])["spark"]["query"] == f"flinkpy_{jid}"
    assert (new_location / "metadata").read_text().splitlines()[0] == (location / "metadata").read_text().splitlines()[0]
    assert _batches(new_location, "commits")[: held + 1] == list(range(held + 1))


def _refusals(tmp: Path, location: Path) -> None:
    """Another parallelism, -n, a directory that is no checkpoint, a location with no committed batch; a claim."""
    checkpoint = restore.retained_checkpoint(str(location))
    assert checkpoint is not None and checkpoint.query_name == f"flinkpy_{location.parent.name}"
    # Spark fixed the state's partitions: another parallelism is refused, pointing to a savepoint
    with pytest.raises(FlinkpyError) as refused:
        restore.check_resume(checkpoint, home=tmp, shuffle_partitions=2, allow_non_restored_state=False)
    line = str(refused.value)
    assert refused.value.exit_code == ExitCode.INVALID_PROGRAM and "would use 2" in line and "-p 1" in line and "savepoint" in line
    with pytest.raises(FlinkpyError) as refused:
        restore.check_resume(checkpoint, home=tmp, shuffle_partitions=1, allow_non_restored_state=True)
    assert refused.value.exit_code == ExitCode.USAGE and "all of its query's state or none" in refused.value.message
    (tmp / "empty").mkdir()
    with pytest.raises(FlinkpyError) as refused:
        restore.retained_checkpoint(str(tmp / "empty"))
    assert refused.value.exit_code == ExitCode.NOT_FOUND and "nor a Spark checkpoint location" in refused.value.message
    unstarted = tmp / "unstarted" / location.parent.name / "spark"
    shutil.copytree(location, unstarted)
    shutil.rmtree(unstarted / "commits")
    with pytest.raises(FlinkpyError) as refused:
        restore.retained_checkpoint(str(unstarted.parent))
    assert refused.value.exit_code == ExitCode.NOT_FOUND and "no committed batch" in refused.value.message
    assert os.path.isdir(location / "commits")
    # --claim-mode claim moves the checkpoint into the new job's location: nothing resumes it twice
    claimed = tmp / "claimed" / location.parent.name / "spark"
    shutil.copytree(location, claimed)
    into = tmp / "claiming" / "spark"
    restored = restore.resume(restore.retained_checkpoint(str(claimed)), str(into), claim=True)
    assert not claimed.exists() and _batches(into, "commits") == _batches(location, "commits")
    assert restored["id"] == checkpoint.batch_id and (into / restore.QUERY_NAME_FILE).read_text() == checkpoint.query_name
