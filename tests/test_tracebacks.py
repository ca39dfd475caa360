"""A failed task's traceback as the job's author reads it (issue 37, §3): pure functions, no cluster
(the end-to-end run is tests/test_engine_failures.py::test_flinkpy_run_of_a_failing_job_exits_5_with_one_error_line)."""

from __future__ import annotations

import pickle

from flinkpy.client.job_events import JobEventReporter
from flinkpy.client.tracebacks import user_first
from flinkpy.graph.pickling import dumps

ENGINE = "/opt/venv/lib/python3.11/site-packages/flinkpy"
CHAINED = f'''Traceback (most recent call last):
  File "{ENGINE}/task/operators.py", line 137, in process
    self.output.process([f(r) for r in values], timestamps)
  File "/jobs/orders.py", line 12, in parse
    return int(text)
           ^^^^^^^^^
ValueError: invalid literal for int() with base 10: 'x'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "{ENGINE}/task/task.py", line 198, in run
    self.loop.run()
  File "{ENGINE}/task/source_loop.py", line 86, in run
    head(batch, None)
  File "/jobs/orders.py", line 14, in parse
    raise RuntimeError("bad order") from e
  File "{ENGINE}/datastream/functions.py", line 40, in helper
    pass
RuntimeError: bad order
'''


def test_each_chained_traceback_loses_the_engine_frames_above_the_jobs_code() -> None:
    text = user_first(CHAINED)
    assert "task/operators.py" not in text and "task/task.py" not in text and "source_loop.py" not in text
    lines = text.splitlines()
    assert lines.count('  File "/jobs/orders.py", line 12, in parse') == 1
    assert "           ^^^^^^^^^" in lines  # the caret line stays with its frame
    assert "The above exception was the direct cause of the following exception:" in lines
    # what the job's code called stays, flinkpy's API included
    assert f'  File "{ENGINE}/datastream/functions.py", line 40, in helper' in lines
    assert lines[-1] == "(3 flinkpy frames above the job's code not shown: --debug shows the whole traceback)"


def test_an_engine_failure_keeps_its_whole_traceback() -> None:
    trace = f'Traceback (most recent call last):\n  File "{ENGINE}/task/task.py", line 1, in run\n    x()\nOSError: boom\n'
    assert user_first(trace) == trace


def test_pickled_job_code_keeps_its_file_name_and_lines() -> None:
    namespace: dict = {}
    exec(compile("def parse(n):\n    return 1 / n\n", "/jobs/orders.py", "exec"), namespace)
    parse = pickle.loads(dumps(namespace["parse"]))
    try:
        parse(0)
    except ZeroDivisionError as e:
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        assert (tb.tb_frame.f_code.co_filename, tb.tb_lineno) == ("/jobs/orders.py", 2)


def test_an_embedded_run_suggests_no_command_for_a_cluster_that_will_be_gone() -> None:
    job = {"state": "FAILING", "vertices": [{"parallelism": 1}], "events": [{"type": "failed", "reason": "no restart strategy"}]}
    assert JobEventReporter("j1", embedded=True).lines(job) == [
        "Job j1 switched from RUNNING to FAILING: no restart strategy; last cause: its traceback follows"]
    assert JobEventReporter("j1").lines(job) == [
        "Job j1 switched from RUNNING to FAILING: no restart strategy; last cause: see 'flinkpy job exceptions j1'"]
    job["events"][0]["cause"] = "ValueError: x"  # the JobManager names the root cause now
    assert JobEventReporter("j1", embedded=True).lines(job)[0].endswith("last cause: ValueError: x")
