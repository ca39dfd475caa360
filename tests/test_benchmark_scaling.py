"""The benchmark's scaling part (``--only scaling --parallelism 1,2,4,8``): its flag, its filter
of each key's final sum, its report lines and figures, and a small real run at p=1 and p=2."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for
from flinkpy.benchmarks import figures, scaling
from flinkpy.benchmarks.footprint import TaskFootprint
from flinkpy.benchmarks.__main__ import parse_args
from flinkpy.benchmarks.render import TABLES, render
from flinkpy.benchmarks.report import Machine, Report, Run
from flinkpy.benchmarks.workloads import make_lines, run_job


def test_parallelism_flag_takes_a_list_and_refuses_what_is_not_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--only", "scaling"]).parallelism == [1, 2, 4, 8]
    assert parse_args(["--only", "scaling", "--parallelism", "1,3,12"]).parallelism == [1, 3, 12]
    for bad in ("0,2", "1,x", ""):
        with pytest.raises(SystemExit) as exc:
            parse_args(["--only", "scaling", "--parallelism", bad])
        assert exc.value.code == 2
        assert "positive integers separated by commas" in capsys.readouterr().err


@pytest.mark.parametrize("count", [1, 5, 1023, 1024, 1025, 3000])
def test_final_sum_is_the_sum_of_each_keys_numbers(count: int) -> None:
    expected: dict[int, int] = {}
    for n in range(1, count + 1):
        expected[n % scaling.KEYS] = expected.get(n % scaling.KEYS, 0) + n
    assert {k: scaling.final_sum(k, count) for k in expected} == expected
    assert all(scaling.final_sum(k, count) == 0 for k in range(scaling.KEYS) if k not in expected)
    assert scaling.loop_sums(count)[0] == count  # the loop checks it let through one sum per key


def _result() -> dict[str, Any]:
    per_p = {p: {"runtime_s": 4.0 / p, "rate": 250.0 * p, "ratio": 0.5 * p, "speedup": float(p), "runtimes_s": [4.0 / p],
                 "footprint": {"tasks": 2 * p, "uss": 15.0 * 2**20, "uss_max": 16 * 2**20, "sockets": 1.0 + p, "sockets_max": 2 + p,
                               "sockets_total": 2 * p * (1 + p)}} for p in (1, 2)}
    return {"cores": 2, "parallelisms": [1, 2], "checkpointed": {"parallelism": 2, "rate": 450.0, "vs_off": 0.9},
            "shapes": {"sums": {"records": 1000, "unit": "records/s", "loop_rate": 500.0, "per_p": per_p},
                       "w1": {"records": 1000, "unit": "words/s", "loop_rate": 500.0, "per_p": per_p}}}


def test_scaling_figures_are_one_known_table_with_a_row_per_job_machine_and_p() -> None:
    found = figures.collect({"scaling": _result()})
    assert {f.table for f in found} == {"scaling", "footprint"} and {"scaling", "footprint"} <= {t.key for t in TABLES}
    assert len({f.key for f in found}) == len(found), "two figures for one cell"
    cells = {(f.row, f.column): f.value for f in found}
    assert cells[("running sums, 2 cores, p=2", "speed-up over p=1")] == 2.0
    assert cells[("W1, 2 cores, p=1", "runtime")] == 4.0
    assert cells[("running sums, 2 cores, plain loop", "rate")] == 500.0
    assert cells[("running sums, 2 cores, p=2, exactly-once checkpoints every 1 s", "checkpoints every 1 s / off")] == 0.9
    assert cells[("running sums, 2 cores, p=2", "sockets of the job")] == 12 and ("W1, 2 cores, p=2", "sockets of the job") in cells
    lines = scaling.report(_result())
    assert any(line.split()[:3] == ["W1", "2", "2.00s"] for line in lines), lines
    page = render([Report([Run("2026-11-29", "x", Machine(2), {}, found)])])
    assert "## Scaling with parallelism" in page and "## Memory and sockets per task" in page and "## Past 16 cores" in page


@pytest.mark.timeout(120)
def test_the_scaling_jobs_run_at_two_parallelisms_on_a_real_cluster(tmp_path: Path) -> None:
    """Both jobs, small, at p=1 and p=2 on a real cluster; the running sums print each key's
    final sum once, and every one of them is right."""
    from flinkpy.cluster import EmbeddedCluster

    count = 20_000
    expected = {(k, scaling.final_sum(k, count)) for k in range(scaling.KEYS)}
    paths = scaling.write_files(make_lines(1_000), tmp_path)
    assert len(paths) == scaling.FILES
    printed = tmp_path / "stdout.txt"
    with printed.open("w") as out, EmbeddedCluster(slots=2, job_stdout=out) as cluster:
        address, token = cluster.rest_address, cluster.token()
        for p in (1, 2):
            assert run_job(address, token, lambda env: scaling.job_sums(env, count), p, f"test-scaling-sums-p{p}") > 0
        assert run_job(address, token, lambda env: scaling.job_w1(env, paths), 2, "test-scaling-w1-p2") > 0

        def lines() -> list[str]:
            return [line for line in printed.read_text().splitlines() if line.strip()]

        wait_for(lambda: len(lines()) >= 2 * scaling.KEYS, timeout=30, message="each key's final sum printed by both runs")
        printed_sums = lines()
        # the footprint of a p=2 run: four task processes (source and keyed chain per subtask),
        # each with its control connection and a socket per channel of the hash edge
        with TaskFootprint(interval_s=0.05) as watch:
            run_job(address, token, lambda env: scaling.job_sums(env, 200_000), 2, "test-scaling-sums-footprint")
        seen = watch.result()
        assert seen is not None and seen.tasks == 4, seen
        assert seen.sockets >= 3 and seen.sockets_total >= 4 * 3 and 2**20 < seen.uss <= seen.uss_max < 2**30, seen
    # p=2 prefixes its lines with the printing subtask ("2> "); both runs print the same sums
    found = [ast.literal_eval(line.split("> ", 1)[-1]) for line in printed_sums]
    assert len(found) == 2 * scaling.KEYS and set(found) == expected
