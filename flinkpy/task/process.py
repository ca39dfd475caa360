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
import select
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
from typing import Any

from flinkpy.network import channels as net
from flinkpy.network.connection import Connection, listen
from flinkpy.task.watermarks import MAX_WATERMARK

SOURCE_BATCH = 1024


def _now_ms() -> int:
    return int(time.time() * 1000)


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
        from flinkpy.task.fault_points import FaultPoints

        self.faults = FaultPoints(tdd)
        if tdd.get("storage_outage_until"):  # deployed during an injected storage outage
            from flinkpy.checkpoint.storage import set_outage

            set_outage(tdd["storage_outage_until"])
        self.records_in = 0
        self.alignment_bytes = 0
        self.aligner: Any = None
        self._pending_triggers: list[dict[str, Any]] = []
        #: checkpoint id -> completed (True) or aborted (False), as notified
        self._notified: dict[int, bool] = {}
        #: stopped with a savepoint without draining: the end of input carries no final watermark
        self.stopped_without_drain = False
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

    # -- control messages (checkpoint triggers and notifications) ---------------------------

    def _control_pending(self) -> bool:
        if self.ctrl.buffered:
            return True
        readable, _, _ = select.select([self.ctrl.sock], [], [], 0)
        return bool(readable)

    def _handle_control(self) -> None:
        """Handle one control message; the TaskManager closing the connection ends the task."""
        msg = self.ctrl.recv()
        if msg is None:
            os._exit(3)
        op, body = msg
        if op == "trigger_checkpoint":
            self._pending_triggers.append(body)
        elif op == "notify_checkpoint_complete":
            self._notified[body["checkpoint_id"]] = True
            self.checkpointer.notify_complete(body["checkpoint_id"])
            self.faults.reach("after-complete", body["checkpoint_id"])
        elif op == "notify_checkpoint_aborted":
            cid = body["checkpoint_id"]
            self._notified[cid] = False
            if self.aligner is not None and self.aligner.abort(cid):
                self._release_held()
            self.checkpointer.notify_aborted(cid)
        elif op == "cancel":
            os._exit(4)
        # faults injected through the cluster (`flinkpy fault ...`, see flinkpy.faults)
        elif op == "fault_raise":
            self._arm_raise(body.get("operator"), int(body.get("after", 0)))
        elif op == "fault_decline":
            self.checkpointer.decline_next += int(body.get("count", 1))
        elif op == "fault_storage_outage":
            from flinkpy.checkpoint.storage import set_outage

            set_outage(body["until"])
        elif op == "fault_network":
            self._network_fault(bool(body.get("drop")), float(body.get("delay_ms", 0)), float(body.get("seconds", 0)))

    def _network_fault(self, drop: bool, delay_ms: float, seconds: float) -> None:
        """`flinkpy fault network`: a slow or a broken link on this task's output channels.

        Delay: each data buffer waits ``delay_ms`` before it is sent, for ``seconds`` (control
        frames do not wait: a slow link, not a stuck one). Drop: the sockets are shut down at
        once, without END_OF_PARTITION, as a lost connection would be; the consumers see a
        broken channel and this task fails at its next send, and the job restarts.
        """
        channels = [ch for w in self.writers.values() for ch in w.channels]
        if drop:
            for ch in channels:
                try:
                    ch.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return
        until = time.monotonic() + seconds
        for ch in channels:
            ch.delay_s, ch.delay_until = delay_ms / 1000.0, until

    def _arm_raise(self, operator: str | None, after: int) -> None:
        """Make the ``after``-th next record of ``operator`` (default: the first operator after
        the source, else the head) raise InjectedFault from inside the operator's process call,
        i.e. where a user function's exception would come from. Wraps the operator once."""
        from flinkpy.faults import InjectedFault

        ops_ = self.chain.operators
        if operator:
            named = [o for o in ops_ if o.name == operator]
            target = named[0] if named else ops_[0]
        else:
            target = ops_[1] if self.chain.source is not None and len(ops_) > 1 else ops_[0]
        inner = target.process
        left = [after]

        def process(values: list, timestamps: list[int] | None) -> None:
            if left[0] >= len(values):
                left[0] -= len(values)
                return inner(values, timestamps)
            n = left[0]
            if n:
                inner(values[:n], timestamps[:n] if timestamps is not None else None)
            target.process = inner  # one shot: a restarted attempt is a fresh process anyway
            raise InjectedFault(f"injected fault (flinkpy fault raise) in operator {target.name} of {self.describe} at record {after} after arming")

        target.process = process
        if target is self.chain.head and hasattr(self, "_head"):
            self._head = process  # the input loop calls the head through this cached method

    def _checkpoint(self, barrier: dict[str, Any], *, source_offsets: Any = None, alignment_ms: float = 0.0, alignment_bytes: int = 0) -> None:
        """Forward the barrier (after the records before it), then snapshot.

        ``barrier`` is {checkpoint_id, timestamp, mode, kind, dir?, stop?, drain?}: a savepoint
        writes its files into its own directory ``dir``."""
        payload = pickle.dumps(barrier)
        for w in self.writers.values():
            w.broadcast_event(net.BARRIER, payload)
        self.checkpointer.snapshot(
            barrier["checkpoint_id"], barrier["timestamp"], source_offsets=source_offsets,
            alignment_ms=alignment_ms, alignment_bytes=alignment_bytes, directory=barrier.get("dir"),
            base=barrier.get("base"),
        )

    def _await_savepoint(self, checkpoint_id: int) -> bool:
        """Stop-with-savepoint: hold the source until the savepoint completed (True) or failed."""
        self._notified.pop(checkpoint_id, None)
        while checkpoint_id not in self._notified:
            self._handle_control()
            self._pending_triggers.clear()  # no further checkpoints of a stopping job
        return self._notified.pop(checkpoint_id)

    # -- run ---------------------------------------------------------------------------------

    def run(self) -> int:
        from flinkpy.state.key_groups import key_group_range_for_operator
        from flinkpy.task.chain import OperatorChain
        from flinkpy.task.checkpointing import TaskCheckpointer

        t = self.tdd
        try:
            payload = self._load_payload()
            self._listen()
            msg = self.ctrl.recv()
            if msg is None or msg[0] != "connect":
                return 3
            self._connect_inputs(msg[1]["peers"])
            self._build_writers(payload)

            def backend() -> Any:
                from flinkpy.datastream.state_backend import create_keyed_backend

                maxp = t["max_parallelism"]
                kg_range = key_group_range_for_operator(maxp, t["parallelism"], t["subtask"])
                return create_keyed_backend(t["config"].get("state_backend") or {}, maxp, kg_range)

            chain = OperatorChain(payload, dict(self.writers), tdd=t, backend_factory=backend)
            self.chain = chain
            self.checkpointer = TaskCheckpointer(t, chain, self.ctrl.send)
            chain.open()
            self.started = time.monotonic()
            self.ctrl.send("running", None)
            self.faults.reach("running")
            if chain.source is not None:
                self._run_source(chain)
                if not self.stopped_without_drain:
                    chain.head.process_watermark(MAX_WATERMARK)  # the end of a bounded input: event time ends
            else:
                self._run_inputs(chain)
            chain.end_input()
            for w in self.writers.values():
                w.finish(stopped=self.stopped_without_drain)
            self.checkpointer.close()
            chain.close()
            if chain.backend is not None:
                chain.backend.close()  # the RocksDB backend deletes its working directory
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

    def _run_source(self, chain: Any) -> None:
        from flinkpy.connectors.base import ReaderContext

        t = self.tdd
        restored = chain.restored_source_state()
        reader = chain.source.create_reader(
            ReaderContext(
                subtask_index=t["subtask"],
                parallelism=t["parallelism"],
                job_id=t["job_id"],
                operator_name=t["vertex_name"],
                attempt=t["attempt"],
                restored_state=restored,
                side_output=lambda tag, records: chain.head.side_output(tag, records, None),
            )
        )
        source_head = chain.head
        head = source_head.process
        writers = list(self.writers.values())
        monotonic = time.monotonic
        control_pending = self._control_pending
        triggers = self._pending_triggers
        emitters = [source_head, *chain.watermark_emitters]
        wm_interval = int(self.tdd["config"].get("auto_watermark_ms", 200)) / 1000.0
        next_wm = monotonic() + wm_interval
        strategy = getattr(source_head, "strategy", None)
        idle_after = (strategy.idle_timeout_ms / 1000.0) if strategy is not None and strategy.idle_timeout_ms else None
        last_data = monotonic()
        try:
            while True:
                if control_pending():
                    self._handle_control()
                    head = source_head.process  # a fault_raise may have wrapped the head
                    stop = False
                    while triggers:
                        trig = triggers.pop(0)
                        if trig.get("drain"):
                            # drain: event time ends before the savepoint, so windows and timers fire
                            source_head.process_watermark(MAX_WATERMARK)
                        # the reader's position now is exactly "everything before the barrier"
                        self._checkpoint(trig, source_offsets=reader.snapshot_state())
                        if trig.get("stop") and self._await_savepoint(trig["checkpoint_id"]):
                            stop = True
                            self.stopped_without_drain = not trig.get("drain")
                            break
                    if stop:
                        break
                batch = reader.poll(SOURCE_BATCH)
                if batch is None:
                    break
                now = monotonic()
                if batch:
                    self.records_in += len(batch)
                    head(batch, None)
                    last_data = now
                else:
                    if idle_after is not None and now - last_data >= idle_after:
                        source_head.mark_idle()
                    select.select([self.ctrl.sock], [], [], 0.001)  # idle unbounded source: wait for control
                if now >= next_wm and wm_interval > 0:
                    for e in emitters:
                        e.emit_periodic_watermark()
                    next_wm = now + wm_interval
                if writers:
                    for w in writers:
                        w.flush_if_due(now)
        finally:
            reader.close()

    def _run_inputs(self, chain: Any) -> None:
        from flinkpy.task.barriers import BarrierAligner, BarrierTracker, Canceled, Snapshot

        from flinkpy.task.watermarks import StatusWatermarkValve

        self._head = chain.head.process
        self._head_watermark = chain.head.process_watermark
        self._head_status = chain.head.process_watermark_status
        self.valve = StatusWatermarkValve(len(self.inputs))
        self._idle_out = False
        mode = self.tdd["config"].get("checkpointing_mode", "EXACTLY_ONCE")
        n = len(self.inputs)
        self.aligner = BarrierAligner(n) if mode == "EXACTLY_ONCE" else BarrierTracker(n)
        self._Snapshot, self._Canceled = Snapshot, Canceled
        self._held: list[list[tuple[int, bytes]]] = [[] for _ in self.inputs]
        #: channels whose socket reached EOF with their END_OF_PARTITION still held
        self._drained: set[int] = set()
        #: the barriers seen, by checkpoint id (a savepoint's carries its directory)
        self._barriers: dict[int, dict[str, Any]] = {}
        sel = selectors.DefaultSelector()
        for i, ch in enumerate(self.inputs):
            sel.register(ch.sock, selectors.EVENT_READ, i)
        sel.register(self.ctrl.sock, selectors.EVENT_READ, -1)
        self._selector = sel
        self._open_channels = n
        timeout_s = int(self.tdd["config"].get("buffer_timeout_ms", 100)) / 1000.0
        monotonic = time.monotonic
        writers = list(self.writers.values())
        aligner = self.aligner
        timers = chain.timer_services
        emitters = chain.watermark_emitters
        wm_interval = int(self.tdd["config"].get("auto_watermark_ms", 200)) / 1000.0
        next_wm = monotonic() + wm_interval
        while self._open_channels:
            if self.ctrl.buffered:
                self._handle_control()
                continue
            pending = any(w.oldest is not None for w in writers)
            timeout = timeout_s if pending else None
            next_timer = min((t for t in (ts.next_processing_time() for ts in timers) if t is not None), default=None)
            if next_timer is not None:
                until = max(0.0, next_timer / 1000.0 - time.time())
                timeout = until if timeout is None else min(timeout, until)
            if emitters:
                until = max(0.0, next_wm - monotonic())
                timeout = until if timeout is None else min(timeout, until)
            waited = monotonic()
            events = sel.select(timeout)
            self.idle_s += monotonic() - waited
            if next_timer is not None:
                for ts in timers:
                    ts.fire_processing_timers()
            if emitters and monotonic() >= next_wm:
                for e in emitters:
                    e.emit_periodic_watermark()
                next_wm = monotonic() + wm_interval
            for key, _ in events:
                i = key.data
                if i == -1:
                    self._handle_control()
                    continue
                ch: net.InputChannel = self.inputs[i]
                if ch.finished or i in self._drained:
                    continue  # closed by a held END_OF_PARTITION released earlier in this round
                held = self._held[i]
                try:
                    frames = ch.reader.feed()
                except OSError as e:
                    raise net.ChannelBroken(f"{ch.describe} broke ({e}): the producer failed") from e
                if frames is None:
                    if any(kind == net.END_OF_PARTITION for kind, _ in held):
                        # the end of the partition is already here, held behind a barrier: the
                        # producer closed after sending it, as it should
                        self._selector.unregister(ch.sock)
                        self._drained.add(i)
                        continue
                    raise net.ChannelBroken(f"{ch.describe} closed before the end of its partition: the producer failed")
                for frame in frames:
                    if held or aligner.is_blocked(i):
                        held.append(frame)  # behind a barrier: wait for the alignment
                    else:
                        self._handle_frame(i, frame)
            if writers:
                now = monotonic()
                for w in writers:
                    w.flush_if_due(now)
        sel.close()

    def _handle_frame(self, i: int, frame: tuple[int, bytes]) -> None:
        kind, data = frame
        ch = self.inputs[i]
        if kind == net.DATA or kind == net.DATA_TS:
            ch.credit.on_buffer_received()
            if kind == net.DATA:
                batch, timestamps = pickle.loads(data), None
            else:
                batch, timestamps = pickle.loads(data)
            self.records_in += len(batch)
            if self.aligner.aligning:
                self.alignment_bytes += len(data)
            self._head(batch, timestamps)
            ch.return_credit()
        elif kind == net.WATERMARK:
            advanced = self.valve.on_watermark(i, struct.unpack(">q", data)[0])
            self._after_valve(advanced)
        elif kind == net.WATERMARK_STATUS:
            advanced = self.valve.on_status(i, idle=data == b"\x01")
            self._after_valve(advanced)
        elif kind == net.BARRIER:
            b = pickle.loads(data)
            self._barriers[b["checkpoint_id"]] = b
            decision = self.aligner.on_barrier(i, b["checkpoint_id"], _now_ms())
            if self.aligner.aligning and self.faults:
                self.faults.reach("alignment", b["checkpoint_id"])
            self._on_decision(decision, b)
        elif kind == net.END_OF_PARTITION:
            if i not in self._drained:
                self._selector.unregister(ch.sock)
            ch.close()
            self._open_channels -= 1
            stopped = data == net.STOPPED
            if stopped:
                self.stopped_without_drain = True
            self._after_valve(self.valve.on_end_of_partition(i, advance=not stopped))
            self._on_decision(self.aligner.on_end_of_partition(i, _now_ms()), None)
        else:
            raise net.ChannelBroken(f"unexpected frame kind {kind} on {ch.describe}")

    def _after_valve(self, advanced: int | None) -> None:
        """The task's event time advanced, or its inputs went idle / active."""
        if advanced is not None:
            self._head_watermark(advanced)
        if self.valve.all_idle != self._idle_out:
            self._idle_out = self.valve.all_idle
            self._head_status(self._idle_out)

    def _on_decision(self, decision: Any, barrier: dict[str, Any] | None) -> None:
        if decision is None:
            return
        if isinstance(decision, self._Canceled):
            self.checkpointer.decline(decision.checkpoint_id, f"a newer checkpoint's barrier reached {self.describe} during its alignment")
            self._release_held()
            return
        if decision.canceled is not None:
            self.checkpointer.decline(decision.canceled, f"a newer checkpoint's barrier reached {self.describe} during its alignment")
        b = self._barriers.pop(decision.checkpoint_id, None) or barrier or {
            "checkpoint_id": decision.checkpoint_id, "timestamp": _now_ms(), "mode": "EXACTLY_ONCE", "kind": "checkpoint"}
        self._checkpoint(b, alignment_ms=decision.alignment_ms, alignment_bytes=self.alignment_bytes)
        self.alignment_bytes = 0
        self._release_held()

    def _release_held(self) -> None:
        """Process, in order, the frames held back behind barriers of channels now unblocked."""
        progress = True
        while progress:
            progress = False
            for i, held in enumerate(self._held):
                while held and not self.aligner.is_blocked(i):
                    self._handle_frame(i, held.pop(0))
                    progress = True

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
