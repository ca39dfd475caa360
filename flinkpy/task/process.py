"""The task process: one parallel subtask of one operator chain, in its own OS process.

Forked by its TaskManager's launcher (flinkpy.taskmanager.zygote), or started as
``python -m flinkpy.task.process FD PARENT_PID``, with one end of a socketpair as its control
connection. The life of a task:

1. receive the deployment descriptor; unpickle the chain (the only place user code is loaded);
2. open a listener for the consumers of its outputs and report the port (``listening``);
3. receive the producers' addresses (``connect``), connect its input channels, wait for its
   consumers, open the operators, report ``running``;
4. run: a source polls its reader; other tasks read frames from their input channels;
5. at the end of input: end the operators, flush, send END_OF_PARTITION, report ``finished``.

Any exception is reported as ``failed`` with the user's traceback, naming job, task and subtask.
If the TaskManager dies the control connection closes and the task exits at once (and the
kernel's parent-death signal covers a TaskManager killed with SIGKILL).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from flinkpy.network import channels as net
from flinkpy.network.connection import Connection, listen

SOURCE_BATCH = 1024


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when our parent dies; exit now if it already has."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    if os.getppid() != parent_pid:
        os._exit(1)


class Task:
    def __init__(self, tdd: dict[str, Any], ctrl: Connection):
        self.tdd = tdd
        self.ctrl = ctrl
        self.secret: bytes = tdd["secret"]
        self.describe = f"{tdd['vertex_name']} ({tdd['subtask'] + 1}/{tdd['parallelism']})"
        self.inputs: list[net.InputChannel] = []
        self.writers: dict[int, Any] = {}
        self.acceptor: net.ChannelAcceptor | None = None
        self.records_in = 0
        self.idle_s = 0.0
        self.started = time.monotonic()

    # -- setup -------------------------------------------------------------------------------

    def _load_payload(self) -> Any:
        for p in reversed(self.tdd.get("python_path", [])):
            if p not in sys.path:
                sys.path.insert(0, p)
        import cloudpickle  # noqa: F401  (registers reducers the payload may need)

        return pickle.loads(self.tdd["payload"])

    def _listen(self) -> None:
        expected = {(o["edge_id"], c) for o in self.tdd["outputs"] for c in o["consumers"]}
        port = None
        if expected:
            listener = listen(self.tdd["host"], 0)
            port = listener.getsockname()[1]
            self.acceptor = net.ChannelAcceptor(listener, self.secret, self.tdd["job_id"], self.tdd["subtask"], expected)
        self.ctrl.send("listening", {"host": self.tdd["host"], "port": port, "pid": os.getpid()})

    def _connect_inputs(self, peers: dict[str, Any]) -> None:
        credit = int(self.tdd["config"].get("credit", 4))
        for inp in self.tdd["inputs"]:
            for producer in inp["producers"]:
                host, port = peers[f"{inp['source_vertex']}:{producer}"]
                ch = net.open_input_channel(
                    host,
                    port,
                    self.secret,
                    job_id=self.tdd["job_id"],
                    edge_id=inp["edge_id"],
                    producer=producer,
                    consumer=self.tdd["subtask"],
                    initial_credit=credit,
                    describe=f"edge {inp['edge_id']} from subtask {producer} of vertex {inp['source_vertex']}",
                )
                self.inputs.append(ch)

    def _build_writers(self, payload: Any) -> None:
        from flinkpy.task.record_writer import RecordWriter

        accepted = self.acceptor.wait_all(timeout=30.0) if self.acceptor else {}
        cfg = self.tdd["config"]
        for out in self.tdd["outputs"]:
            chans = []
            for c in out["consumers"]:
                sock, reader = accepted[(out["edge_id"], c)]
                chans.append(
                    net.make_output_channel(
                        sock, reader, out["edge_id"], c, f"edge {out['edge_id']} to subtask {c} of vertex {out['target_vertex']}"
                    )
                )
            self.writers[out["edge_id"]] = RecordWriter(
                chans,
                out["partitioner"],
                key_selector=payload.edge_key_selectors.get(out["edge_id"]),
                max_parallelism=out["target_max_parallelism"],
                consumer_parallelism=out["target_parallelism"],
                buffer_timeout_ms=int(cfg.get("buffer_timeout_ms", 100)),
                segment_size=int(cfg.get("segment_size", 32768)),
                seed=self.tdd["subtask"],
            )

    def _watch_control(self) -> None:
        """After setup, the control connection only matters when it closes: the TaskManager is gone."""
        while True:
            try:
                msg = self.ctrl.recv()
            except OSError:
                msg = None
            if msg is None:
                os._exit(3)
            if msg[0] == "cancel":
                os._exit(4)

    # -- run ---------------------------------------------------------------------------------

    def run(self) -> int:
        from flinkpy.state.heap import HeapKeyedStateBackend
        from flinkpy.state.key_groups import key_group_range_for_operator
        from flinkpy.task.chain import OperatorChain

        t = self.tdd
        try:
            payload = self._load_payload()
            self._listen()
            msg = self.ctrl.recv()
            if msg is None or msg[0] != "connect":
                return 3
            self._connect_inputs(msg[1]["peers"])
            self._build_writers(payload)
            threading.Thread(target=self._watch_control, name="control", daemon=True).start()

            def backend() -> Any:
                maxp = t["max_parallelism"]
                return HeapKeyedStateBackend(maxp, key_group_range_for_operator(maxp, t["parallelism"], t["subtask"]))

            emitters = {edge: w.emit for edge, w in self.writers.items()}
            chain = OperatorChain(payload, emitters, tdd=t, backend_factory=backend)
            chain.open()
            self.started = time.monotonic()
            self.ctrl.send("running", None)
            if chain.source is not None:
                self._run_source(chain)
            else:
                self._run_inputs(chain)
            chain.end_input()
            for w in self.writers.values():
                w.finish()
            chain.close()
            sys.stdout.flush()
            self.ctrl.send("finished", self._metrics())
            return 0
        except BaseException as e:  # noqa: BLE001 - everything is reported, then the process ends
            self._report_failure(e)
            return 1

    def _records_out(self) -> int:
        return sum(w.records_out for w in self.writers.values())

    def _metrics(self) -> dict[str, Any]:
        """Flink's task metrics, totals over the task's life (ms): busy, idle, back-pressured."""
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        wall_ms = (time.monotonic() - self.started) * 1000
        backpressured_ms = sum(ch.backpressured_s for w in self.writers.values() for ch in w.channels) * 1000
        return {
            "records_in": self.records_in,
            "records_out": self._records_out(),
            "wall_ms": round(wall_ms, 1),
            "cpu_ms": round((ru.ru_utime + ru.ru_stime) * 1000, 1),
            "idle_ms": round(self.idle_s * 1000, 1),
            "backpressured_ms": round(backpressured_ms, 1),
            "busy_ms": round(max(0.0, wall_ms - self.idle_s * 1000 - backpressured_ms), 1),
        }

    def _flush_due(self, now: float) -> None:
        for w in self.writers.values():
            w.flush_if_due(now)

    def _run_source(self, chain: Any) -> None:
        from flinkpy.connectors.base import ReaderContext

        t = self.tdd
        reader = chain.source.create_reader(
            ReaderContext(subtask_index=t["subtask"], parallelism=t["parallelism"], job_id=t["job_id"], operator_name=t["vertex_name"], attempt=t["attempt"])
        )
        head = chain.head.process
        flush_due = self._flush_due
        monotonic = time.monotonic
        try:
            while True:
                batch = reader.poll(SOURCE_BATCH)
                if batch is None:
                    break
                if batch:
                    self.records_in += len(batch)
                    head(batch)
                else:
                    time.sleep(0.001)  # an idle unbounded source: do not spin
                flush_due(monotonic())
        finally:
            reader.close()

    def _run_inputs(self, chain: Any) -> None:
        head = chain.head.process
        sel = selectors.DefaultSelector()
        for ch in self.inputs:
            sel.register(ch.sock, selectors.EVENT_READ, ch)
        open_channels = len(self.inputs)
        loads = pickle.loads
        timeout_s = int(self.tdd["config"].get("buffer_timeout_ms", 100)) / 1000.0
        monotonic = time.monotonic
        writers = list(self.writers.values())
        while open_channels:
            pending = any(w.oldest is not None for w in writers)
            waited = monotonic()
            events = sel.select(timeout_s if pending else None)
            self.idle_s += monotonic() - waited
            for key, _ in events:
                ch: net.InputChannel = key.data
                try:
                    frames = ch.reader.feed()
                except OSError as e:
                    raise net.ChannelBroken(f"{ch.describe} broke ({e}): the producer failed") from e
                if frames is None:
                    raise net.ChannelBroken(f"{ch.describe} closed before the end of its partition: the producer failed")
                for kind, data in frames:
                    if kind == net.DATA:
                        ch.credit.on_buffer_received()
                        batch = loads(data)
                        self.records_in += len(batch)
                        head(batch)
                        ch.return_credit()
                    elif kind == net.END_OF_PARTITION:
                        sel.unregister(ch.sock)
                        ch.close()
                        open_channels -= 1
                    else:
                        raise net.ChannelBroken(f"unexpected frame kind {kind} on {ch.describe}")
            if writers:
                now = monotonic()
                for w in writers:
                    w.flush_if_due(now)
        sel.close()

    def _report_failure(self, e: BaseException) -> None:
        t = self.tdd
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001
            pass
        try:
            self.ctrl.send(
                "failed",
                {
                    "exception": f"{type(e).__module__}.{type(e).__qualname__}".removeprefix("builtins."),
                    "message": str(e),
                    "stacktrace": tb,
                    "task": self.describe,
                },
            )
        except OSError:
            pass


def run_task(fd: int) -> int:
    """Run the task whose control socket is ``fd``; returns the process exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the client; the TaskManager cancels us
    ctrl = Connection(socket.socket(fileno=fd))
    msg = ctrl.recv()
    if msg is None or msg[0] != "deploy":
        return 2
    task = Task(msg[1], ctrl)
    profile_dir = os.environ.get("FLINKPY_TASK_PROFILE_DIR")
    if not profile_dir:
        return task.run()
    # a developer's aid: one cProfile dump per task, named after the task
    import cProfile

    profiler = cProfile.Profile()
    try:
        return profiler.runcall(task.run)
    finally:
        name = f"{task.tdd['vertex_id']}-{task.tdd['subtask']}-{task.tdd['attempt']}.prof"
        profiler.dump_stats(os.path.join(profile_dir, name))


def main() -> None:
    """Entry point when started as its own interpreter (the zygote forks tasks instead)."""
    fd, parent = int(sys.argv[1]), int(sys.argv[2])
    die_with_parent(parent)
    code = run_task(fd)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    main()
