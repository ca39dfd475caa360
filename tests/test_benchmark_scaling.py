"""The benchmark's scaling part (``--only scaling --parallelism 1,2,4,8``): its flag, its filter
of each key's final sum, its report lines and figures, the machine's ceiling, and a small real
run at p=1 and p=2 with its tasks' costs."""

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
from flinkpy.benchmarks.task_costs import fetch, net_of, task_costs
from flinkpy.benchmarks.workloads import LAST_JOB_ID, make_lines, run_job


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
    per_p = {p: {"runtime_s": 4.0 / p, "rate": 250.0 * p, "ratio": 0.5 * p, "speedup": float(p), "runtimes_s": [4.0 / p], "keys_bound": 0.9 * p,
                 "footprint": {"tasks": 2 * p, "uss": 15.0 * 2**20, "uss_max": 16 * 2**20, "sockets": 1.0 + p, "sockets_max": 2 + p,
                               "sockets_total": 2 * p * (1 + p)},
                 "ceiling": 1.0 + 0.5 * (p - 1), "of_ceiling": p / (1.0 + 0.5 * (p - 1)),
                 "costs": {"start_s": 0.05 * p, "busiest_cpu_s": 3.0 / p, "vertices": [
                     {"name": "Source: numbers -> Map", "subtasks": p, "cpu_ns_per_record": 300.0 + 50 * p, "busiest_cpu_s": 1.0 / p,
                      "busy": 0.6, "idle": 0.0, "backpressured": 0.4, "fixed_cpu_s": 0.04,
                      "records_per_buffer": 4000.0 / p, "bytes_per_buffer": 32000.0 / p},
                     {"name": "Keyed Reduce -> Filter", "subtasks": p, "cpu_ns_per_record": 700.0 + 50 * p, "busiest_cpu_s": 3.0 / p,
                      "busy": 0.9, "idle": 0.1, "backpressured": 0.0}]}} for p in (1, 2)}
    return {"cores": 2, "parallelisms": [1, 2], "checkpointed": [{"parallelism": 2, "rate": 450.0, "vs_off": 0.9, "checkpoints": 3, "checkpoint_ms": 42.0,
                              "alignment_ms_max": 7.0}],
            "ceiling": {p: {"processes": 2 * p, "wall_s": 2.0 / (1.0 + 0.5 * (p - 1)), "cpu_ns_per_record": 500.0 + p} for p in (1, 2)},
            "shapes": {"sums": {"records": 1000, "unit": "records/s", "loop_rate": 500.0, "per_p": per_p},
                       "w1": {"records": 1000, "unit": "words/s", "loop_rate": 500.0, "per_p": per_p}}}


def test_scaling_figures_are_one_known_table_with_a_row_per_job_machine_and_p() -> None:
    found = figures.collect({"scaling": _result()})
    assert {f.table for f in found} == {"scaling", "footprint", "task_costs"}
    assert {"scaling", "footprint", "task_costs"} <= {t.key for t in TABLES}
    assert len({f.key for f in found}) == len(found), "two figures for one cell"
    cells = {(f.row, f.column): f.value for f in found}
    assert cells[("running sums, 2 cores, p=2", "speed-up over p=1")] == 2.0
    assert cells[("W1, 2 cores, p=1", "runtime")] == 4.0
    assert cells[("running sums, 2 cores, plain loop", "rate")] == 500.0
    assert cells[("running sums, 2 cores, p=2, exactly-once checkpoints every 1 s", "checkpoints every 1 s / off")] == 0.9
    assert cells[("running sums, 2 cores, p=2", "sockets of the job")] == 12 and ("W1, 2 cores, p=2", "sockets of the job") in cells
    assert cells[("running sums, 2 cores, p=2, exactly-once checkpoints every 1 s", "a checkpoint, trigger to last acknowledgement")] == 42.0
    assert cells[("running sums, 2 cores, p=2", "the machine's ceiling")] == 1.5
    assert cells[("running sums, 2 cores, p=2", "speed-up of the ceiling")] == pytest.approx(2 / 1.5)
    assert cells[("running sums, 2 cores, p=2", "every task running after")] == 0.1
    assert cells[("W1, 2 cores, p=2", "speed-up the keys allow")] == 1.8
    assert cells[("running sums, 2 cores, p=2: Keyed Reduce -> Filter", "CPU per record")] == 800.0
    assert cells[("running sums, 2 cores, p=1: Source: numbers -> Map", "back-pressured")] == 0.4
    assert cells[("running sums, 2 cores, p=1: Source: numbers -> Map", "fixed CPU per task")] == 40.0
    assert ("running sums, 2 cores, p=1: Keyed Reduce -> Filter", "fixed CPU per task") not in cells
    assert cells[("running sums, 2 cores, p=2: Source: numbers -> Map", "records per buffer sent")] == 2000.0
    assert cells[("plain loop, 2 cores, 4 processes at once", "CPU per record")] == 502.0
    lines = scaling.report(_result())
    assert any(line.split()[:3] == ["W1", "2", "2.00s"] for line in lines), lines
    assert any(line.split()[-3:] == ["1.80", "1.50", "1.33"] for line in lines), lines
    assert "the loop in 4 processes at once: 1.33 s, 502 ns of CPU per record" in lines
    page = render([Report([Run("2026-11-29", "x", Machine(2), {}, found)])])
    for title in ("Scaling with parallelism", "Memory and sockets per task", "Where the time goes, per task", "Past 16 cores"):
        assert f"## {title}" in page
    assert "| 800 ns |" in page


def test_the_keys_bound_is_all_records_over_the_busiest_keyed_subtasks() -> None:
    """Checked against each subtask's own range of key groups (the inverse mapping, another code
    path): W1's Zipf words bound p=8 well below 8, the sums' even keys nearly at it."""
    from collections import Counter

    from flinkpy.state.key_groups import assign_to_key_group, key_group_range_for_operator

    words = Counter(word for line in make_lines(20_000) for word in line.split())
    for p in (1, 2, 3, 8, 12):
        owned = [set(key_group_range_for_operator(128, p, i)) for i in range(p)]
        loads = [sum(n for word, n in words.items() if assign_to_key_group(word, 128) in groups) for groups in owned]
        assert scaling.keys_bound(words, p) == pytest.approx(sum(loads) / max(loads))
    assert scaling.keys_bound(words, 1) == 1.0
    assert scaling.keys_bound(words, 8) < 4  # the commonest word alone is a tenth of them
    even = {k: 1 for k in range(scaling.KEYS)}
    assert 7 < scaling.keys_bound(even, 8) <= 8


@pytest.mark.timeout(120)
def test_the_machine_s_ceiling_runs_the_loop_in_2p_processes_over_every_number_once() -> None:
    """The ceiling's processes share 1..count without a gap or an overlap, each runs the
    running sums' functions, and the figures are the slowest's wall time and all their CPU."""
    count = 30_001
    for processes in (1, 2, 3, 4):
        shares = [scaling.ceiling.share(count, i, processes) for i in range(processes)]
        assert [n for s in shares for n in s] == list(range(1, count + 1))
    keep = scaling.FinalSum(count)
    # one process over every number lets each key's final sum through, as the job prints it
    assert scaling.ceiling.loop_share(range(1, count + 1), scaling.to_keyed, scaling.first, keep) == scaling.KEYS
    found = scaling.ceiling.measure([2], count, 1, (scaling.to_keyed, scaling.first, keep), lambda _: None)
    assert sorted(found) == [1, 2] and [c.processes for c in found.values()] == [2, 4]
    assert all(0 < c.wall_s < 60 and 10 < c.cpu_ns_per_record < 1e6 for c in found.values()), found
    assert set(scaling.ceiling.cores()) == {"logical", "physical", "usable"}


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
        # the same run's costs, from its tasks' final metrics: two vertices of two subtasks,
        # each with CPU spent on the records and shares of its running time
        costs = task_costs(fetch(address, token, LAST_JOB_ID["test-scaling-sums-footprint"]), 200_000)
        assert [v.subtasks for v in costs.vertices] == [2, 2] and 0 <= costs.start_s < 30, costs
        assert all(50 < v.cpu_ns_per_record < 1e6 and 0 < v.busiest_cpu_s <= costs.busiest_cpu_s for v in costs.vertices), costs
        assert all(0 <= share <= 1 for v in costs.vertices for share in (v.busy, v.idle, v.backpressured)), costs
        assert costs.vertices[1].busy > 0, costs
        # the sources' data buffers (numBuffersOut, numBytesOut): each holds many records; the
        # keyed chain ends in a sink and sends none
        source, keyed = costs.vertices
        assert source.records_per_buffer is not None and 10 < source.records_per_buffer <= 200_000, source
        assert source.bytes_per_buffer is not None and source.bytes_per_buffer > source.records_per_buffer, source
        assert keyed.records_per_buffer is None, keyed
        # net of each task's fixed CPU, measured by the same job over a few numbers
        run_job(address, token, lambda env: scaling.job_sums(env, scaling.TINY), 2, "test-scaling-sums-tiny")
        tiny = task_costs(fetch(address, token, LAST_JOB_ID["test-scaling-sums-tiny"]), scaling.TINY)
        net = net_of(costs, tiny, 200_000, scaling.TINY)
        for gross, v in zip(costs.vertices, net.vertices):
            assert v.fixed_cpu_s is not None and 0 < v.fixed_cpu_s < 5 and v.cpu_ns_per_record < gross.cpu_ns_per_record, (gross, v)
    # p=2 prefixes its lines with the printing subtask ("2> "); both runs print the same sums
    found = [ast.literal_eval(line.split("> ", 1)[-1]) for line in printed_sums]
    assert len(found) == 2 * scaling.KEYS and set(found) == expected
