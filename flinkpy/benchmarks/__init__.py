"""The project's benchmark: ``python -m flinkpy.benchmarks [--quick] [--json] [--runs N]``.

Workloads (as in ../shared/PEERS.md):

- W1: word count over 2,000,000 words (200,000 lines of 10 words, Zipf vocabulary of 10,000
  words, seed 42): lines -> flat_map split -> map (word, 1) -> key_by word -> reduce -> sink.
- W2: even/odd running sums over 1..5,000,000: numbers -> key_by parity -> reduce -> sink.
- The two-input join (``join``): W1's words as two streams (half the lines each), connected and
  keyed by word into a KeyedCoProcessFunction that counts each side per word; reported against
  W1 taken in turns with it in the same run (see flinkpy.benchmarks.two_input).

``peers-form`` runs W1 and W2 as peers' benchmarks write them: a FileSource over 20 files (W2:
a number sequence), a Python SinkFunction receiving every record, checkpoints every 1 s, p=1,
start-up subtracted (see flinkpy.benchmarks.peers_form).

The ``metrics`` part runs W1 and W2 at parallelism 2 with live metrics on and off
(``metrics.enabled``), alternating, and reports both rates and their ratio
(see flinkpy.benchmarks.metrics_cost).

``--only backpressure`` runs a job whose sink takes a tenth of its source's rate, with exactly-once
checkpoints every 1 s, aligned, aligned with buffer debloating, and unaligned, and reports the
checkpoints' durations (median, p99), alignment times, the sink's throughput and, for unaligned
checkpoints, the bytes stored in flight (see flinkpy.benchmarks.backpressure).

The ``async`` part runs async I/O (``AsyncDataStream``, capacity 100, a 5 ms "remote call")
against a plain asyncio loop issuing the same requests with the same capacity (see
flinkpy.benchmarks.async_io).

``--only rabbitmq --rabbitmq-url URL`` reads a queue of persistent messages with RMQSource
(acknowledging on checkpoints every 1 s) against a pika consumer acknowledging in batches, on a
server the caller runs (see flinkpy.benchmarks.rabbitmq).
``--only iceberg`` writes numbers through the IcebergSink with checkpoints every 1 s and appends
the same batches to a table by hand with pyiceberg (see flinkpy.benchmarks.iceberg; needs the
iceberg extra).

``--only scaling --parallelism 1,2,4,8`` runs running sums over 1..10,000,000 keyed by ``n % 1024``
(a number sequence, a map, a reduce, a filter printing each key's final sum) and W1 from 16 files
(W1's lines five times over: 10,000,000 words) at each parallelism, on a cluster with a slot per
parallel pipeline, and prints each one's net runtime (the CLI's "Job Runtime"), rate, ratio to the
loop and speed-up over p=1; the machine's own ceiling (the loop in 2p processes at once against
two) and the speed-up as a share of it; and, from one more run's task metrics, each vertex's CPU
per record, fixed CPU per task, busiest subtask and busy, idle and back-pressured shares (see
flinkpy.benchmarks.scaling).

On a machine with Python 3.12 and flinkpy's other dependencies but no network (a lent 16-core
machine), the scaling part runs from the source tree with the three missing packages put beside
it first, here::

    pip install --target .device/site --python-version 3.12 --only-binary=:all: \
        --platform manylinux2014_x86_64 --implementation cp kazoo rocksdict prometheus_client

and then, there, with ``.device`` carried along (about 14 MB)::

    PYTHONPATH=.device/site:. python3 -m flinkpy.benchmarks --only scaling \
        --parallelism 1,2,4,8,12 --runs 2 --report "$OUT/scaling-16.json"

``--only spark`` runs W1 and W2 on the Spark runner and as hand-written PySpark queries instead
(see flinkpy.benchmarks.spark).

Each runs on flinkpy at parallelism 1 and 2 on one embedded cluster (real JobManager,
TaskManager and task processes), and, in the same run, as a plain single-process Python loop
that calls the same user functions (flat_map, map, key selector, reduce) with no engine in
between. It prints records/s and the ratio flinkpy / loop: ratios, because absolute times on a
shared machine are not stable. The engine's time is the job's net runtime as the JobManager
measures it (RUNNING to FINISHED: task start-up included, cluster start-up not).

``startup`` (``--only startup``, and in a full run) measures the wall time from starting
``flinkpy run examples/word_count.py`` (embedded cluster start-up included) to the job's first
line of output, over 20 runs (5 with ``--quick``), and reports the median and the maximum.
This is a measurement tool, not a test: it asserts nothing.

Where the environment turns Python's bytecode cache off (``PYTHONDONTWRITEBYTECODE``), the
benchmark turns it on for the processes it starts, in a directory of its own, as an installed
flinkpy has it (see flinkpy.benchmarks.bytecode).

``--report FILE.json`` also writes every figure the run measured, with its date, command,
machine (cores, memory, load average at the start and the end) and versions (Python, flinkpy,
and the peers' it measured): :mod:`~flinkpy.benchmarks.report` holds the records and the
schema, :mod:`~flinkpy.benchmarks.figures` turns a run's results into them (each part module's
``figures`` its own), and ``python -m flinkpy.benchmarks.render`` turns reports into the
documentation's performance page (:mod:`~flinkpy.benchmarks.render`).

One module per concern, none importing another's logic but the shared workloads:
:mod:`~flinkpy.benchmarks.workloads` (data, user functions, the loop, the jobs),
:mod:`~flinkpy.benchmarks.snapshots` (checkpoints, savepoints, recovery),
:mod:`~flinkpy.benchmarks.windows`, :mod:`~flinkpy.benchmarks.latency`,
:mod:`~flinkpy.benchmarks.backends`, :mod:`~flinkpy.benchmarks.spark`,
:mod:`~flinkpy.benchmarks.failover`, :mod:`~flinkpy.benchmarks.metrics_cost`,
:mod:`~flinkpy.benchmarks.two_input`, :mod:`~flinkpy.benchmarks.peers_form`,
:mod:`~flinkpy.benchmarks.backpressure`, :mod:`~flinkpy.benchmarks.async_io`,
:mod:`~flinkpy.benchmarks.rabbitmq`, :mod:`~flinkpy.benchmarks.scaling` (its job's functions in
:mod:`~flinkpy.benchmarks.sums`, which every task imports); ``__main__`` parses the flags, runs the parts asked for and
prints the report.
"""
