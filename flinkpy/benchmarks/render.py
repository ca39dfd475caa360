"""The performance page from benchmark reports: ``python -m flinkpy.benchmarks.render``.

    python -m flinkpy.benchmarks.render                       # docs/performance/*.json -> stdout
    python -m flinkpy.benchmarks.render A.json B.json -o docs/performance.md
    python -m flinkpy.benchmarks.render --check docs/performance.md

Every figure of every report goes into one table per benchmark table; where several runs
measured the same cell the latest run's figure is shown (runs are ordered by date, then by the
order they were read in). Under each table: the date, command, machine and versions of the runs
its figures come from (numbered, with each cell's source marked, when there are several). Above
each: what bounds its figures, in prose that holds whatever the numbers are.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from flinkpy.benchmarks.report import Figure, Report, Run, Unit, load
from flinkpy.benchmarks.workloads import ROOT

REPORTS_DIR = ROOT / "docs" / "performance"
PAGE = ROOT / "docs" / "performance.md"
COMMAND = "python -m flinkpy.benchmarks.render -o docs/performance.md"


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    bounds: str  # what bounds the figures: one short paragraph, no numbers that a run measures
    row_label: str = ""


TABLES: list[Table] = [
    Table("workloads", "W1 and W2 against the plain loop",
          "The plain loop calls the same user functions in one process with nothing between them: the ceiling for "
          "an engine that runs Python functions. At p=1 a keyed job is already two processes, the source chain and "
          "the keyed chain, working as a pipeline, so it uses two cores; p=2 runs twice the processes on the same "
          "cores and adds hash partitioning in the senders, so on a 2-core machine it cannot run ahead of p=1 (and "
          "W1's Zipf keys put most words on one of the two reducers). Per record the engine adds an append to an "
          "output buffer, one dict lookup for the key's state and its share of a pickled batch; the keyed task is "
          "CPU-bound. Times are the jobs' net runtimes, RUNNING to FINISHED, task start-up included.", "workload"),
    Table("peers-form", "W1 and W2 as peers' benchmarks write them",
          "A FileSource over 20 files (W2: a number sequence), every running update delivered to a Python "
          "SinkFunction, exactly-once checkpoints every second, p=1, and start-up subtracted by the sink itself (from "
          "its first record to its close()). The loop calls the same functions, the sink's included, and runs in "
          "turns with the job, so that a change of load moves both sides of a ratio alike. The keyed chain bounds "
          "the job: its reduce, unpickling, the user's functions and the sink's call per record. Bytewax's figures "
          "are its own dataflow of the same workload with recovery on, its start-up included.", "workload"),
    Table("checkpoint-cost", "What checkpoints cost",
          "Exactly-once checkpoints every second against none, in the same run. The pause a snapshot takes from "
          "processing is a copy-on-write freeze of the keyed state; serializing and uploading run beside the "
          "records, so the cost is within the machine's noise. Alignment holds the inputs whose barrier has arrived "
          "until every input's has: at p=2 the keyed tasks align two channels, the two-input join both of its "
          "inputs.", "job"),
    Table("join", "Two inputs",
          "W1's words as two streams, connected and keyed by word into a KeyedCoProcessFunction that counts each "
          "side, taken in turns with W1 and with the same update in a one-input KeyedProcessFunction. Two inputs "
          "cost about what a process function costs: the join's distance to W1 is that of a process function (a "
          "call with a context, a state object) to W1's reduce.", "job"),
    Table("metrics", "What live metrics cost",
          "W1 and W2 with metrics.enabled on and off, alternating. On a shared machine wall time moves by more "
          "than the cost being measured, in both directions, so the tasks' CPU per record and the reporter threads' "
          "own share of it settle the question: the hot path takes no lock and reads no clock per record.", "workload"),
    Table("snapshots", "Snapshots of keyed state",
          "The synchronous part of a heap-backend snapshot is a copy-on-write freeze of the key groups: it does not "
          "grow with the state. The asynchronous part serializes, writes and checksums the state while records keep "
          "flowing, and grows with it.", "state"),
    Table("recovery", "Recovery after a task is killed",
          "From SIGKILL of the keyed task to every task running again, restored from the latest checkpoint, with a "
          "restart delay of 0: noticing the dead process, starting new task processes and reading the state back, "
          "which is the part that grows with the state.", "state"),
    Table("savepoint", "Savepoints",
          "A savepoint of keyed state (a canonical, self-contained snapshot), and the time from submitting a job "
          "with -s from it to every task running, restored.", "state"),
    Table("windows", "Event-time windows",
          "The event-time W1 (line i of a file stamped i x 10 ms) through sliding 5 s / 1 s and tumbling 5 s "
          "windows, against a rolling reduce of the same stream, taken in turns, p=1. Windows keep their state as "
          "slices in the operator, one dict per slice end, so a record costs a lookup and a fold, as in the rolling "
          "reduce; a window fires when the watermark passes its end by combining its slices key by key, with no "
          "timer per key. A tumbling window can outrun the rolling reduce because it emits one result per key and "
          "window, the rolling reduce every update. Bytewax's figures: its count_window with an EventClock, one "
          "worker, over the first tenth of the same words stamped the same way.", "window"),
    Table("latency", "Latency",
          "map, key_by, reduce and a sink at p=1, paced at half of the peak rate; the sink takes each record's time "
          "since it was emitted. A buffer leaves when it is full or when the buffer timeout expires; with a timeout "
          "of 0 every record is a frame of its own, and at a high rate the cost per frame outweighs the waiting it "
          "saves.", "run"),
    Table("failover", "JobManager failover",
          "SIGKILL of the leading JobManager to every task of the job running on the new leader, under ZooKeeper "
          "high availability. The ZooKeeper session timeout bounds it, being how long ZooKeeper takes to declare "
          "the old leader gone; election, the TaskManagers' registration, restore from the checkpoint and task "
          "start add little.", "setting"),
    Table("first-output", "Start-up",
          "From starting the command to its first printed line: starting Python and importing, running the job file "
          "up to execute(), starting the embedded cluster (JobManager, TaskManager, supervisor) and deploying the "
          "job.", "command"),
    Table("backends", "State backends",
          "W1 and W2 at p=2 on the heap backend and on RocksDB, in the same run. On RocksDB a state access is a read "
          "or a write of pickled bytes: W1, with 10,000 keys, pays it for every word; W2, with two keys, for each "
          "key once per batch.", "workload"),
    Table("large-state", "Large state on RocksDB",
          "A keyed process function keeps a 128-byte incompressible value per key, p=2, incremental checkpoints "
          "each after about 1% of the keys changed. An incremental checkpoint uploads the store files written "
          "since the last one: about what changed, unless RocksDB compacted in between, since every key group's "
          "keys are spread over the whole store and a compaction rewrites whole levels, which the next checkpoint "
          "uploads again (universal compaction makes that rarer). The synchronous pause is a memtable flush and hard "
          "links, flat in the state size. A savepoint is streamed frame by frame, so the tasks' memory stays flat "
          "while it is written; restoring an incremental checkpoint makes its files the stores, restoring a "
          "savepoint writes every key again.", "state"),
    Table("backpressure", "Checkpoints under back-pressure",
          "A paced source (p=2) whose sink (p=2, behind a rebalance) takes a tenth of its rate, exactly-once "
          "checkpoints every second. Aligned, a barrier queues behind every full buffer the credit allows on each "
          "channel, and the next checkpoint starts only when one ends. Buffer debloating shrinks the buffers until "
          "the data in flight takes about its target time to process. Unaligned, the barrier overtakes the queued "
          "buffers, which are stored with the checkpoint; what is left is part of one buffer, since a task processes "
          "a buffer in slices and sees a barrier between two of them.", "configuration"),
    Table("async", "Async I/O",
          "Requests that each wait a fixed delay (a remote call), at most the capacity of them in flight, against a "
          "plain asyncio loop that keeps the same number in flight: the ceiling is the capacity over the delay. The "
          "operator's event loop runs in a thread of the task; the task thread hands it records and emits results, "
          "so what it adds per request is two hand-offs between threads and the checkpointed queue's bookkeeping.",
          "mode"),
    Table("rabbitmq", "Reading a RabbitMQ queue",
          "Persistent messages read from one durable queue on a local server: a pika consumer acknowledging every "
          "1000 deliveries at once, against RMQSource at p=1 into a discarding sink with checkpoints every 1 s, which "
          "acknowledges each checkpoint's deliveries in one frame when the checkpoint completes. The job's time "
          "includes its tasks' start-up.",
          "reader"),
    Table("rabbitmq_sink", "Writing to a RabbitMQ queue",
          "Persistent messages published to one durable queue on a local server: a pika publisher in confirm mode, "
          "whose every publish waits for the server's confirm (a round trip and the server's write), against "
          "RMQSink at p=1 from a collection with checkpoints every 1 s, which keeps publishing while confirms come "
          "in (at most a window of them awaited) and waits for all at each checkpoint. The job's time includes its "
          "tasks' start-up.",
          "writer"),
    Table("iceberg", "Into an Iceberg table",
          "The IcebergSink at p=1 with exactly-once checkpoints every second against a program that appends the same "
          "batches (the records of each snapshot the job made) with pyiceberg alone. Both write Parquet through "
          "Arrow and commit one snapshot per batch to a SQL catalog on a local file system; the job adds its "
          "records' trip through the engine (a source task, a map, pickled batches to the sink's task), the sink's "
          "conversion of tuples to Arrow, and its start-up, pyiceberg's import in the sink's task included.",
          "writer"),
    Table("kafka", "Kafka, exactly once",
          "A topic of keyed lines (4 partitions) split into words, counted per word and every update written to a "
          "topic, exactly once with a commit every second, three ways on one noida-db server and one input: the "
          "consume-transform-produce loop a Python user writes with confluent-kafka (one process, a dict, one "
          "transactional producer), Quix Streams with its exactly-once guarantee (it keys the words through a "
          "repartition topic and keeps counts in RocksDB), and flinkpy's job run whole by flinkpy run at p=2 with "
          "checkpoints every second (its KafkaSink commits a transaction per checkpoint). Each is timed as a whole "
          "process, start-up included, until a read_committed reader finds every word's final count; the rate is "
          "input lines per second of that time, and the first output is the time to the first committed update "
          "(start-up, the first records' way and the first commit). Every contender runs with its modules' "
          "bytecode cached, as installed packages have it. The loop pays no serialization between steps; flinkpy pays the "
          "cluster's start, the key_by between processes and the wait for a checkpoint to commit the last records; "
          "its sink also gives each update its input line's Kafka timestamp, as Flink's does (the loop lets the "
          "producer stamp them). The updates committed equal the words read when nothing was written twice.", "contender"),
    Table("spark", "The Spark runner against hand-written PySpark",
          "W1 and W2 three ways in one run on one warm local[2] session: flinkpy's engine at p=2, the same job through "
          "the Spark runner, and the query a PySpark user writes (W1 with a Python UDF, W2 in Column expressions), "
          "both Spark sides bringing every output row to the driver. Rates are records in per second of wall time "
          "from the start to the query's end. Each side runs its own idiom of the job: flinkpy's keyed reduce emits "
          "every running value, Spark's update-mode aggregation each changed key once per micro-batch. The "
          "hand-written W2 never leaves the JVM, while the job calls its Python functions for every int.", "workload"),
    Table("spark-phases", "Where a Spark query's time goes",
          "Spark's progress reports per phase, summed over a query's micro-batches. The session's start and one "
          "warm-up query each way are paid before the timed runs and not counted in their rates.", "query"),
    Table("spark-shapes", "Job shapes on the Spark runner, as whole processes",
          "Each shape as a user runs it: flinkpy run --runner spark --spark-master local[2] -p 2 on the job file, "
          "against the hand-written query (a Python UDF for the split, Column expressions elsewhere, update mode, "
          "checkpointing on, availableNow) run as its own Python process, both timed from start to exit. Start-up is "
          "the same command on a tiny input, reported apart; rates are records in per second of the full run's wall "
          "time less that start-up, and ratios are taken run by run, the two sides in turns. flinkpy's job emits "
          "every running value to its filter and sink, Spark's aggregation each changed key once per micro-batch; "
          "the hand-written ints never leave the JVM. On the Spark runner the job's arithmetic functions over a "
          "number sequence run once per batch over numpy columns, and the filter after a reduce runs inside it; "
          "the word shapes call their functions per record. Net rates are small differences of two "
          "whole-process times, so their spread is wide: more runs narrow it.", "shape"),
    Table("peers", "Peers on their own",
          "Each engine runs W1 and W2 at p=1 its usual way. The loop calls the user functions per record in one "
          "process; the fused loop updates a dict with no function calls; the bare two-process pipe (one process "
          "reading, splitting and pickling batches over a loopback socket, the other unpickling and reducing) is "
          "what any engine of processes can reach on the machine. Bytewax's core is Rust but calls the Python "
          "functions per record; Spark starts a JVM before any work; PyFlink runs the Python functions beside a "
          "JVM.", "engine"),
    Table("scaling", "Scaling with parallelism",
          "From `python -m flinkpy.benchmarks --only scaling`: running sums keyed by n % 1024 (a number sequence, a map, "
          "a reduce, a filter printing each key's final sum) and W1 read from 16 files (its lines five times over, as "
          "many words as the sums' numbers; before 2026-11-30 once), at each parallelism, on the "
          "machine the row names. Times are the jobs' net runtimes, the CLI's \"Job Runtime\"; the loop calls the same "
          "functions in one process. A keyed job at parallelism p is 2p processes: the speed-up is bounded by half the "
          "cores, and on a machine of fewer cores more parallelism only adds processes, channels and hash partitioning. "
          "The machine's ceiling is the same loop in 2p processes at once, each over its share, against two: what the "
          "cores give 2p busy processes (hyperthreads, a lower clock under full load, fewer cores than processes). "
          "The speed-up of the ceiling is the job's speed-up over it. The speed-up the keys allow is all the records "
          "over those of the busiest keyed subtask, each key counted where its key group sends it: the keyed chain "
          "bounds both jobs at p=1, so no machine takes them past it. The sums' 1,024 even keys nearly split evenly; "
          "W1's Zipf words do not (its commonest word is a tenth of the words, and one subtask holds it and its share "
          "of the rest). Every task running after: from the job's RUNNING to its last task's, in the watched run "
          "(deploying 2p processes and connecting p x p channels).",
          "job and machine"),
    Table("footprint", "Memory and sockets per task",
          "From `python -m flinkpy.benchmarks --only scaling`: one more run of the running sums at each parallelism, "
          "its task processes looked at once a second: each task's unique memory (USS, the pages no other process "
          "shares: what one more task costs) and open sockets at their largest, the median and the largest over the "
          "tasks, and the job's sockets together. They grow with p whatever the machine's cores: see Past 16 cores.",
          "job and machine"),
    Table("task_costs", "Where the time goes, per task",
          "From `python -m flinkpy.benchmarks --only scaling`: the watched run of the running sums at each "
          "parallelism, from its tasks' own metrics as the JobManager keeps them. Per vertex: the CPU of all its "
          "subtasks per record, net of the fixed CPU each task spends starting, connecting and finishing (measured by "
          "the same job over 4,096 numbers), that fixed CPU, the records and bytes per data buffer it sent (how full "
          "buffers leave), its busiest subtask's CPU time (with a core per process the job takes no less), and the "
          "medians of the busy, idle and back-pressured shares of each subtask's running time. The plain loop's "
          "rows are the machine's ceiling runs: CPU per record that grows there grows from sharing the cores, not "
          "from the job.", "job and machine"),
    Table("partitions", "Across hosts: TLS and partitions",
          "From `python -m flinkpy.benchmarks --only partitions` (root): a drill cluster whose JobManager and two "
          "TaskManagers live on network-namespace hosts. Throughput: a keyed count at p=2 whose records cross between "
          "the TaskManagers' hosts, with internal TLS off and on, in turns. Recovery: an endless job checkpointing every "
          "200 ms, timed from the cut to every subtask running again (and, for the cut between TaskManagers, a "
          "checkpoint completed after it), with heartbeat.timeout 2 s; and, with ZooKeeper and two JobManagers on hosts of "
          "their own, the leader cut off from ZooKeeper, timed from the cut to the job running under the other one.", "measurement"),
    Table("lifecycle", "A job's lifecycle: downtime",
          "From `python -m flinkpy.benchmarks --only lifecycle`: a paced job (a keyed count of a sequence, each record "
          "stamped with the time it was counted, committed by a two-phase sink at checkpoints every 200 ms) replaced "
          "by the same program with `flinkpy upgrade` in each mode, and rescaled in place. The pause is read from the "
          "committed output: from the last record counted before the operation to the first counted after it. A "
          "savepoint upgrade pauses from the stop's savepoint to the new job's first record; a last-state upgrade "
          "also loses, and replays, what was counted after its checkpoint; a stateless one starts its sources afresh. "
          "Every upgrade starts a new job (a process per task, the program run once more to build its graph); a "
          "rescale restarts the job's tasks in place. The command returns once the new job is healthy: running, a "
          "checkpoint completed.", "operation"),
    Table("scale-up", "Scaling with cores",
          "Running sums keyed by n % 1024 on a 16-core machine. Each parallel pipeline is two processes, so p=8 "
          "fills the cores and more parallelism adds little; the sandbox the machine runs in makes system calls "
          "dearer than a plain kernel does.", "parallelism"),
]

_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


# --------------------------------------------------------------------------- formatting


def _number(value: float, unit: Unit) -> str:
    if unit in (Unit.WORDS_PER_S, Unit.INTS_PER_S, Unit.RECORDS_PER_S):
        if value >= 1e6:
            return f"{value / 1e6:.2f} M"
        if value >= 1e4:
            return f"{value / 1e3:.0f} k"
        return f"{value:,.0f}"
    if unit is Unit.RATIO:
        return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"
    if unit is Unit.MS:
        if value >= 10_000:
            return f"{value / 1000:.1f} s"
        if value >= 1000:
            return f"{value / 1000:.2f} s"
        return f"{value:.0f} ms" if value >= 10 else f"{value:.2g} ms"
    if unit is Unit.NS:
        return f"{value:,.0f} ns"
    if unit is Unit.S:
        return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"
    if unit is Unit.BYTES:
        for size, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if value >= size:
                scaled = value / size
                return f"{scaled:.2f} {name}" if scaled < 10 else f"{scaled:.1f} {name}" if scaled < 100 else f"{scaled:.0f} {name}"
        return f"{value:.0f} B"
    if unit is Unit.SHARE:
        return f"{value * 100:.2f}%"
    return f"{value:,.0f}"


def _suffix(unit: Unit) -> str:
    return f" {unit.value}" if unit in (Unit.WORDS_PER_S, Unit.INTS_PER_S, Unit.RECORDS_PER_S) else ""


def cell(figure: Figure) -> str:
    """A figure as its table shows it: ``1.44 M words/s``, ``0.65 (0.43–0.74)``, ``4.8 s–8.7 s``."""
    if figure.value is None and figure.spread is None:
        return "–"
    if figure.value is None:
        assert figure.spread is not None
        text = f"{_number(figure.spread[0], figure.unit)}–{_number(figure.spread[1], figure.unit)}{_suffix(figure.unit)}"
    else:
        text = _number(figure.value, figure.unit) + _suffix(figure.unit)
        if figure.spread is not None:
            text += f" ({_number(figure.spread[0], figure.unit)}–{_number(figure.spread[1], figure.unit)})"
    return text + (f" ({figure.note})" if figure.note else "")


def source_line(run: Run) -> str:
    """When, how, where and with what a run measured."""
    m = run.machine
    where = [f"{m.cores} cores"]
    if m.memory_bytes:
        where.append(f"{m.memory_bytes / 2**30:.0f} GiB")
    if m.load_average and m.load_average_end:
        where.append(f"load average {m.load_average[0]:.1f} at the start, {m.load_average_end[0]:.1f} at the end")
    elif m.load_average:
        where.append(f"load average {m.load_average[0]:.1f}")
    if m.description:
        where.append(m.description)
    names = {"python": "Python", "flinkpy": "flinkpy", "bytewax": "Bytewax", "pyspark": "PySpark"}
    order = sorted(run.versions, key=lambda k: (k != "flinkpy", k != "python", k))
    versions = ", ".join(f"{names.get(k, k)} {run.versions[k]}" for k in order)
    line = f"{run.date}, " + (f"`{run.command}`" if run.command else "command not recorded") + f"; {', '.join(where)}"
    if versions:
        line += f"; {versions}"
    if run.transcribed_from:
        line += f". Transcribed from {run.transcribed_from}"
    return _escape(line) + "."


def _escape(text: str) -> str:
    """Pipes would end a table cell, and ``<`` starts HTML; the rest of Markdown is wanted."""
    return text.replace("|", "\\|").replace("<", "&lt;")


# --------------------------------------------------------------------------- the page


def ordered_runs(reports: list[Report]) -> list[Run]:
    """Every run, oldest first; runs of one date in the order they were read."""
    runs = [run for report in reports for run in report.runs]
    return [run for _, run in sorted(enumerate(runs), key=lambda p: (p[1].date, p[0]))]


def natural(text: str) -> tuple[tuple[int, float, str], ...]:
    """A sort key that puts ``p=2`` before ``p=12`` and ``10,000 keys`` before ``100,000 keys``."""
    parts = re.findall(r"\d[\d,]*(?:\.\d+)?|\D+", text)
    return tuple((0, float(p.replace(",", "")), "") if p[0].isdigit() else (1, 0.0, p.casefold()) for p in parts)


def column_order(table: str, runs: list[Run]) -> list[str]:
    """The columns in the order the run with the most of them gave them (the latest of equals),
    then the others as they first appear."""
    per_run = [list(dict.fromkeys(f.column for f in run.figures if f.table == table)) for run in runs]
    ranked = sorted(range(len(runs)), key=lambda i: (-len(per_run[i]), -i))
    return list(dict.fromkeys(c for i in ranked for c in per_run[i]))


def render_table(table: Table, figures: dict[tuple[str, str, str], tuple[Figure, int]], runs: list[Run]) -> list[str]:
    rows = sorted({row for (_, row, _) in figures}, key=natural)
    columns = column_order(table.key, runs)
    sources = sorted({index for (_, _, _), (_, index) in figures.items()})
    number = {index: n for n, index in enumerate(sources, 1)}
    out = [f"## {table.title}", "", table.bounds, ""]
    out.append("| " + " | ".join([table.row_label, *columns]) + " |")
    out.append("|" + "|".join("---" for _ in range(len(columns) + 1)) + "|")
    for row in rows:
        cells = [_escape(row)]
        for column in columns:
            found = figures.get((table.key, row, column))
            if found is None:
                cells.append("")
                continue
            figure, index = found
            mark = str(number[index]).translate(_SUPERSCRIPTS) if len(sources) > 1 else ""
            cells.append(_escape(cell(figure)) + mark)
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    if len(sources) == 1:
        out += ["Measured " + source_line(runs[sources[0]]), ""]
    else:
        out += ["Measured:", ""]
        out += [f"{number[i]}. {source_line(runs[i])}" for i in sources]
        out.append("")
    return out


INTRO = (
    "Figures from `python -m flinkpy.benchmarks` and from measurements recorded beside it, each table with the "
    "runs it comes from. W1 is a word count over "
    "2,000,000 words (200,000 lines of ten words from a Zipf vocabulary of 10,000, seed 42); W2 running sums of "
    "the even and the odd numbers of 1..5,000,000. The plain loop calls the same user functions in one process "
    "with no engine. Read the ratios: they are measured in one run, loop and job in turns, while absolute rates move "
    "with a shared machine's load. A figure in parentheses after another is the range over the runs behind it."
)


#: sections that no run measures (how the design behaves past what was measured), after the tables
NOTES: list[tuple[str, str]] = [
    ("Past 16 cores", (
        "A job at parallelism p runs one process per task, 2p for a source chain feeding a keyed chain, and a "
        "hash edge between them is p x p channels, each its own TCP connection: every source task holds p data "
        "sockets and every keyed task p, besides its control connection to the TaskManager. Sockets per process "
        "grow with p and per job with p squared; the file-descriptor limit of the TaskManager's user "
        "(`ulimit -n`) bounds p before memory does. The table of memory and sockets per task measures both.\n\n"
        "Memory per task is an interpreter with the job's modules (forked from a zygote, so the code's pages are "
        "shared until written; what the zygote imported is frozen out of the task's garbage collector, whose "
        "collections would otherwise write to every object and copy its page), its state, and its channels' buffers: an input channel holds at most its credit, "
        "`taskmanager.network.memory.buffers-per-channel` plus a quarter of "
        "`taskmanager.network.memory.floating-buffers-per-gate` buffers of `taskmanager.memory.segment-size`, and "
        "an output channel queues what its credit does not yet allow. A keyed task's in-flight memory so grows "
        "linearly with p and the job's with p squared; buffer debloating "
        "(`taskmanager.network.memory.buffer-debloat.enabled`) shrinks the buffers when the throughput does not "
        "need them.\n\n"
        "Where the design stops scaling: a source task splits its records over p channels, so at a fixed rate "
        "each channel's buffer fills p times slower and more buffers leave on the buffer timeout, half full, "
        "which costs a frame, a pickle and a send each; a keyed task reads p sockets, and its share of the "
        "partitioning work stays while its share of the records shrinks. Beyond one process per core the tasks "
        "only take turns. Exactly-once alignment waits for the slowest of p channels, so its time grows with "
        "the skew between them. The JobManager's work per checkpoint (a trigger per source, an "
        "acknowledgement per task, one `_metadata` entry per subtask) grows with p, not with p squared, and "
        "stays far from a checkpoint interval of a second at the parallelisms one machine can run; the scaling "
        "table's checkpointed rows time a checkpoint from trigger to last acknowledgement at p=8 and at the "
        "largest p measured.\n\n"
        "A task's fixed cost is mostly the job's modules: the engine's come imported with the zygote, but each "
        "task is a process of its own and imports the job's again (Flink's tasks of a job share one class loader "
        "per TaskManager), so a job whose module imports heavy libraries pays that import once per task, 2p "
        "times for a keyed job.\n\n"
        "Past the keys: a keyed task owns a range of key groups, and a key's group is fixed by its hash and "
        "`pipeline.max-parallelism` (128 unless set), so no keyed job runs faster than its busiest keyed subtask "
        "allows, however many cores. With 128 groups, p=12 gives some subtasks 11 groups and others 10; a job "
        "past p=128 needs the maximum raised, before its first savepoint, since it fixes the key groups of the "
        "state. Skewed keys bound sooner: the scaling table gives each job's speed-up beside the one its keys "
        "allow.\n\n"
        "Reading two-core figures for more cores: on two cores a job at p=8 cannot beat p=1, its 16 processes "
        "take turns. What such a machine measures is each task's work (Where the time goes, per task). CPU per "
        "record that stays flat as p grows means the work scales; the busiest subtask's CPU bounds the job's "
        "time once every process has a core, so its fall with p is the speed-up the job could reach. The "
        "machine's ceiling is the other bound: where cores are hyperthread pairs, or the clock drops when "
        "every core is busy, 2p busy processes gain less than p times two, and no job beats that; the speed-up "
        "of the ceiling is the part of the shortfall that is the job's."
    )),
]


def render_notes() -> list[str]:
    out: list[str] = []
    for title, text in NOTES:
        out += [f"## {title}", "", *[line for para in text.split("\n\n") for line in (para, "")]]
    return out


def render(reports: list[Report]) -> str:
    """The performance page for ``reports`` (Markdown)."""
    runs = ordered_runs(reports)
    latest: dict[tuple[str, str, str], tuple[Figure, int]] = {}
    for index, run in enumerate(runs):
        for figure in run.figures:
            latest[figure.key] = (figure, index)
    known = {t.key for t in TABLES}
    extra = sorted({key[0] for key in latest} - known)
    tables = [t for t in TABLES if any(k[0] == t.key for k in latest)] + [Table(k, k, "") for k in extra]
    out = [
        "# Performance",
        "",
        "<!-- Generated by `python -m flinkpy.benchmarks.render` from docs/performance/*.json; do not edit. -->",
        "",
        INTRO,
        "",
        "To measure again: `python -m flinkpy.benchmarks --report FILE.json` (add `--only PART` for one part), "
        "put the file in `docs/performance/`, and run `" + COMMAND + "`.",
        "",
    ]
    for table in tables:
        figures = {k: v for k, v in latest.items() if k[0] == table.key}
        out += render_table(table, figures, runs)
    out += render_notes()
    return "\n".join(out).rstrip("\n") + "\n"


def committed_reports(directory: Path = REPORTS_DIR) -> list[Path]:
    """The committed reports in the order their runs count, within a date: by name without the
    extension, so that a report measured again that day (``x-b.json``, ``x2.json``) comes after
    its first (``x.json``), whose ``.`` would otherwise sort after the ``-``."""
    return sorted(directory.glob("*.json"), key=lambda path: path.stem)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flinkpy.benchmarks.render", description="Render benchmark reports as the performance page.")
    ap.add_argument("reports", nargs="*", type=Path, help="report files (default: docs/performance/*.json)")
    ap.add_argument("-o", "--output", type=Path, help="write the page here (default: stdout)")
    ap.add_argument("--check", type=Path, metavar="PAGE", help="only compare with PAGE; exit 1 if it differs")
    args = ap.parse_args(argv)
    paths = args.reports or committed_reports()
    try:
        page = render([load(p) for p in paths])
    except (OSError, ValueError) as exc:
        print(f"flinkpy.benchmarks.render: error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if not args.check.is_file() or args.check.read_text(encoding="utf-8") != page:
            print(f"out of date: {args.check} (run {COMMAND})", file=sys.stderr)
            return 1
        return 0
    if args.output:
        args.output.write_text(page, encoding="utf-8")
    else:
        sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
