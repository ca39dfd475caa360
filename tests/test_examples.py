"""Every program in examples/ runs, the way its docstring says to run it, and prints the right thing.

Expected outputs are computed here from the examples' inputs (their TEXT, a generated file, the
closed formula of a sum), never copied from a previous run.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT

PREFIX = re.compile(r"^(?:\d+> )?(.*)$")


def run_example(name: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
        stdin=subprocess.DEVNULL,
    )


def printed_records(stdout: str) -> list:
    """The records a job printed, without the print sink's ``N> `` subtask prefixes."""
    return [ast.literal_eval(PREFIX.match(line).group(1)) for line in stdout.splitlines() if line.strip()]


#: a (string, integer) record of a ``Types.TUPLE`` stream as PyFlink prints it: ``(word,3)``
JAVA_PAIR = re.compile(r"^\((.*),(-?\d+)\)$")


def java_pairs(lines: list[str]) -> list[tuple[str, int]]:
    """The (string, integer) tuples printed in PyFlink's form, without ``N> `` prefixes; a line in
    any other form (Python's ``('a', 1)``) fails the test."""
    pairs = []
    for line in lines:
        if line.strip():
            m = JAVA_PAIR.match(PREFIX.match(line).group(1))
            assert m is not None, f"not PyFlink's form of a tuple: {line!r}"
            pairs.append((m.group(1), int(m.group(2))))
    return pairs


def last_per_key(records: list[tuple]) -> dict:
    final: dict = {}
    for key, value in records:
        final[key] = value
    return final


def example_text() -> list[str]:
    spec = importlib.util.spec_from_file_location("word_count_example", EXAMPLES / "word_count.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines TEXT; runs nothing (the job is behind __main__)
    return module.TEXT


def expected_running_counts(words: list[str]) -> Counter:
    """Every (word, running count) that a running count over ``words`` emits."""
    seen: Counter = Counter()
    out: Counter = Counter()
    for w in words:
        seen[w] += 1
        out[(w, seen[w])] += 1
    return out


def test_every_example_has_a_test():
    tested = {"word_count.py", "even_odd_sum.py", "max_two_sources.py", "showcase.py", "windowed_word_count.py", "sensor_alerts.py",
              "verification_job.py", "orders_to_postgres.py", "click_sessions.py", "orders_shipments.py",
              "fraud_rules.py",  # fraud_rules.py: tests/test_broadcast_state.py
              "sensor_alerts_test.py",  # tests/test_testing_harness.py
              # tests/test_kafka_source.py
              "kafka_json_format.py", "kafka_csv_format.py", "kafka_avro_format.py", "kafka_bytearray_format.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


@pytest.mark.timeout(60)
def test_word_count_with_python_prints_running_counts(flinkpy_home):
    res = run_example("word_count.py")
    assert res.returncode == 0, res.stderr
    # plain `python JOB.py` says on stderr that it runs an embedded cluster, as `flinkpy run` does
    assert "starting an embedded local cluster" in res.stderr and "stopping the embedded local cluster" in res.stderr
    words = [w for line in example_text() for w in line.split()]
    records = java_pairs(res.stdout.splitlines())  # a Types.TUPLE stream prints (word,3), as in PyFlink
    assert Counter(records) == expected_running_counts(words)
    assert last_per_key(records) == dict(Counter(words))


@pytest.mark.timeout(60)
def test_word_count_with_flinkpy_run_announces_the_embedded_cluster(flinkpy_home, cli):
    res = cli("run", "examples/word_count.py")
    assert res.returncode == 0, res.stderr
    assert "starting an embedded local cluster" in res.stderr
    assert re.search(r"Job has been submitted with JobID [0-9a-f]{32}", res.stderr)
    assert re.search(r"Job with JobID [0-9a-f]{32} has finished", res.stderr)
    words = [w for line in example_text() for w in line.split()]
    # stdout carries the job's prints and nothing else
    records = java_pairs(res.stdout.splitlines())
    assert Counter(records) == expected_running_counts(words)


@pytest.mark.timeout(60)
def test_word_count_from_a_file_into_part_files(flinkpy_home, tmp_path: Path):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    vocabulary = [f"word{i}" for i in range(40)] + ["Ünïcode", "a-b", "x'y"]
    lines = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 12))) for _ in range(400)]
    source = tmp_path / "words.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    res = run_example("word_count.py", "--input", str(source), "--output", str(out))
    assert res.returncode == 0, res.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    # Flink's part file names: prefix-<uuid>-<counter>.ext
    assert files and all(re.fullmatch(r"prefix-[0-9a-f-]{36}-\d+\.ext", p.name) for p in files), files
    # SimpleStringEncoder writes a Types.TUPLE record as PyFlink does: (word,3)
    records = java_pairs([line for p in files for line in p.read_text(encoding="utf-8").splitlines()])
    # BATCH mode: one final count per word, nothing else
    assert sorted(records) == sorted(Counter(w for line in lines for w in line.split()).items())


@pytest.mark.timeout(60)
def test_even_odd_sum_final_sums_match_the_closed_formula(flinkpy_home):
    n = 2001
    res = run_example("even_odd_sum.py", "--count", str(n))
    assert res.returncode == 0, res.stderr
    records = java_pairs(res.stdout.splitlines())
    evens, odds = n // 2, (n + 1) // 2
    assert last_per_key(records) == {"even": evens * (evens + 1), "odd": odds * odds}
    assert len(records) == n  # STREAMING: one running sum per input number


@pytest.mark.timeout(90)
def test_even_odd_sum_prints_in_proportion_to_a_long_run(flinkpy_home):
    """The README ran it with --count 100000000, which printed every one of 10^8 running sums
    into the TaskManagers' .out files (708 MB): now about 10,000 lines, the final sums always."""
    n = 300_001
    res = run_example("even_odd_sum.py", "--count", str(n), timeout=80)
    assert res.returncode == 0, res.stderr
    records = java_pairs(res.stdout.splitlines())  # a Types.TUPLE stream prints (even,42)
    evens, odds = n // 2, (n + 1) // 2
    finals = {"even": evens * (evens + 1), "odd": odds * odds}
    assert {key: max(v for k, v in records if k == key) for key in finals} == finals
    assert 9_000 <= len(records) <= 10_100, len(records)
    every = n // 10_000  # the default: a key's sum after every 30th of its numbers
    kept = [(k, v) for k, v in records if v != finals[k]]
    assert all((k == "odd" and math.isqrt(v) % every == 0) or (k == "even" and ((math.isqrt(4 * v + 1) - 1) // 2) % every == 0)
               for k, v in kept), kept[:5]
    assert len(java_pairs(run_example("even_odd_sum.py", "--count", "3000", "--print-every", "100").stdout.splitlines())) == 30


@pytest.mark.timeout(60)
def test_max_two_sources_prints_the_maxima(flinkpy_home):
    res = run_example("max_two_sources.py")
    assert res.returncode == 0, res.stderr
    records = printed_records(res.stdout)
    assert last_per_key(records) == {"even": 98, "odd": 99}
    for parity in ("even", "odd"):
        values = [v for k, v in records if k == parity]
        assert values == sorted(set(values)), "a maximum is printed only when it grows"
        assert all((v % 2 == 0) == (parity == "even") for v in values)


@pytest.mark.timeout(90)
def test_showcase_recovers_from_the_kill_with_exact_sums(flinkpy_home):
    n = 1_000_000
    res = run_example("showcase.py", "--count", str(n), timeout=80)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SIGKILL ->" in res.stdout and "restored from checkpoint" in res.stdout
    half = n // 2
    # the showcase checks itself; check its figures independently too
    assert f"even: {sum(range(2, n + 1, 2))} (expected {half * (half + 1)}) exact" in res.stdout
    assert f"odd: {sum(range(1, n + 1, 2))} (expected {(n - half) ** 2}) exact" in res.stdout


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py") + "_example", EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # runs nothing: the job is behind __main__
    return module


def expected_windowed_word_counts(events: list[tuple[int, str]]) -> Counter:
    """(window end, word, count) of every 5 s window sliding by 1 s that holds the word."""
    counts: Counter = Counter()
    for ts, line in events:
        for word in line.split():
            last_start = ts - ts % 1000
            for start in range(last_start, ts - 5000, -1000):
                counts[(start + 5000, word)] += 1
    return Counter({(end, word, n): 1 for (end, word), n in counts.items()})


@pytest.mark.timeout(60)
def test_windowed_word_count_equals_the_reference_at_p1_and_p2(flinkpy_home, cli):
    events = load_example("windowed_word_count.py").lines(20)
    expected = expected_windowed_word_counts(events)
    res = run_example("windowed_word_count.py")
    assert res.returncode == 0, res.stderr
    assert Counter(printed_records(res.stdout)) == expected
    res2 = cli("run", "-p", "2", "examples/windowed_word_count.py")
    assert res2.returncode == 0, res2.stderr
    assert Counter(printed_records(res2.stdout)) == expected


def expected_sensor_sessions(events: list[tuple[str, float, int]], *, gap: int = 5000, bound: int = 3000, lateness: int = 1000):
    """Session windows behind EveryReading's punctuated watermark (max ts - 3 s - 1 after each
    reading), with allowed lateness: (sessions fired, in order per key; late readings)."""
    sessions: dict = {}  # key -> {(start, end): [temperatures]}
    timers: set = set()  # (window max timestamp, key, window)
    fired: list = []
    late: list = []
    wm = -(2**63)
    highest = None

    def advance(to: int) -> None:
        nonlocal wm
        wm = max(wm, to)
        for t, key, w in sorted(x for x in timers if x[0] <= wm):
            timers.discard((t, key, w))
            fired.append(("SESSION", key, w[0], w[1], len(sessions[key][w]), max(sessions[key][w])))
        for key, ss in sessions.items():
            for w in [w for w in ss if w[1] - 1 + lateness <= wm]:
                del ss[w]

    for key, temp, ts in events:
        ss = sessions.setdefault(key, {})
        new = (ts, ts + gap)
        group = [w for w in ss if w[0] <= new[1] and new[0] <= w[1]]  # overlapping or touching
        window = (min([ts, *(w[0] for w in group)]), max([ts + gap, *(w[1] for w in group)]))
        if window[1] - 1 + lateness <= wm:
            assert not group, "a merge into a window past its cleanup time"
            if ts + lateness <= wm:
                late.append(("LATE", key, ts))
        else:
            temps = [t for w in group for t in ss.pop(w)] + [temp]
            for w in group:
                timers.discard((w[1] - 1, key, w))
            ss[window] = temps
            if window[1] - 1 <= wm:
                fired.append(("SESSION", key, window[0], window[1], len(temps), max(temps)))
            else:
                timers.add((window[1] - 1, key, window))
        highest = ts if highest is None else max(highest, ts)
        advance(highest - bound - 1)
    advance(2**63 - 1)
    return fired, late


@pytest.mark.timeout(60)
def test_sensor_alerts_is_the_same_at_any_parallelism(flinkpy_home):
    readings = load_example("sensor_alerts.py").readings()
    sessions, late = expected_sensor_sessions(readings)
    outputs = {}
    for p in (1, 2, 4):
        res = run_example("sensor_alerts.py", str(p))
        assert res.returncode == 0, res.stderr
        outputs[p] = sorted(printed_records(res.stdout))
    assert outputs[1] == outputs[2] == outputs[4]
    records = outputs[1]
    assert len(late) == 2 and sorted(r for r in records if r[0] == "LATE") == sorted(late)
    got_sessions = [r for r in records if r[0] == "SESSION"]
    assert sorted(got_sessions) == sorted(sessions)
    assert any(r[0] == "ALERT" for r in records)


@pytest.mark.timeout(60)
def test_verification_job_output_verifies(flinkpy_home, tmp_path, cli):
    out = tmp_path / "out"
    res = run_example("verification_job.py", "--keys", "3", "--per-key", "400", "--out", str(out))
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for p in out.glob("part-*.jsonl") for line in p.read_text().splitlines()]
    assert sorted(map(tuple, lines)) == [(k, s, s) for k in range(3) for s in range(1, 401)]
    ok = cli("verify", str(out), "--keys", "3", "--per-key", "400")
    assert ok.returncode == 0, ok.stderr
    assert cli("verify", str(out), "--keys", "3", "--per-key", "401").returncode == 13  # seq 401 never came


@pytest.mark.timeout(180)
def test_chaos_drill_runbook_runs_and_verifies(tmp_path):
    env = dict(os.environ, CHAOS_DURATION="4s", CHAOS_EVERY="1s", CHAOS_SEED="11", DRILL_PER_KEY="3000",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", TMPDIR=str(tmp_path))
    res = subprocess.run(["bash", str(EXAMPLES / "chaos_drill.sh")], capture_output=True, text=True, timeout=170, cwd=str(ROOT), env=env,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    for step in ("1. start a cluster", "3. chaos for 4s", "4. stop with a savepoint", "5. verify the output"):
        assert step in res.stderr
    assert "lost 0, duplicated 0" in res.stdout


@pytest.mark.timeout(90)
def test_orders_to_postgres_writes_each_order_once_and_exact_totals(flinkpy_home, tmp_path, postgres):
    rng = random.Random(7)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    orders, totals = [], Counter()
    for f in range(3):
        lines = []
        for i in range(200):
            oid, customer, amount = f"o{f}-{i}", f"c{rng.randrange(5)}", rng.randrange(1, 100)
            orders.append((oid, customer, amount))
            totals[customer] += amount
            lines.append(f"{oid},{customer},{amount}".encode())
        if f == 1:
            lines.insert(10, b"o-bad,c1,not-a-number")
            lines.insert(20, b"o-\xff,c1,3")  # not UTF-8: rejected by the file source
        (inbox / f"orders-{f}.csv").write_bytes(b"\n".join(lines) + b"\n")
    res = run_example("orders_to_postgres.py", "--dsn", postgres.dsn, "--inbox", str(inbox), "--static", timeout=80)
    assert res.returncode == 0, res.stderr
    assert sorted(postgres.query("SELECT order_id, customer, amount FROM orders")) == sorted(orders)
    assert dict(postgres.query("SELECT customer, total FROM totals")) == dict(totals)
    bad = [line for line in res.stdout.splitlines() if line.strip()]
    assert len(bad) == 2 and any("not-a-number" in b for b in bad) and any("orders-1.csv" in b for b in bad), bad
    assert postgres.prepared() == []


def expected_click_sessions(clicks: list[tuple[str, str, int]], gap_ms: int) -> Counter:
    """Each user's clicks in time order, cut where the next click comes gap_ms or more after the last."""
    by_user: dict[str, list[tuple[int, str]]] = {}
    for user, page, ts in clicks:
        by_user.setdefault(user, []).append((ts, page))
    out: Counter = Counter()
    for user, items in by_user.items():
        items.sort()
        session: list[tuple[int, str]] = []
        for ts, page in items + [(None, None)]:
            if session and (ts is None or ts >= session[-1][0] + gap_ms):
                pages = Counter(p for _, p in session)
                top = sorted(pages.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
                out[(user, session[0][0], session[-1][0], len(session), top)] += 1
                session = []
            if ts is not None:
                session.append((ts, page))
    return out


@pytest.mark.timeout(60)
def test_click_sessions_closes_every_session_once(flinkpy_home):
    example = load_example("click_sessions.py")
    res = run_example("click_sessions.py", "--users", "3", "--seconds", "40")
    assert res.returncode == 0, res.stdout + res.stderr
    expected = expected_click_sessions(example.clicks(3, 40), example.GAP_MS)
    assert Counter(printed_records(res.stdout)) == expected
    assert len(expected) > 10


@pytest.mark.timeout(60)
def test_orders_shipments_joins_each_order_with_its_shipments_within_the_hour(flinkpy_home, cli):
    example = load_example("orders_shipments.py")
    res = cli("run", "-p", "2", "examples/orders_shipments.py", "--orders", "150")
    assert res.returncode == 0, res.stdout + res.stderr
    orders = {o[0]: o for o in example.orders(150)}
    expected = Counter()
    for _, order_id, carrier, shipped in example.shipments(150):
        _, customer, _, placed = orders[order_id]
        if placed <= shipped <= placed + 60 * example.MINUTE:
            expected[(order_id, customer, carrier, (shipped - placed) // example.MINUTE)] += 1
    assert Counter(printed_records(res.stdout)) == expected
    # the data has what the join must tell apart: split parcels, and shipments after the hour
    assert len(expected) > 100 and sum(expected.values()) < len(example.shipments(150))
    assert any(n > 1 for n in Counter(k[0] for k in expected.elements()).values())
