"""The control protocol: typed, versioned messages, decoded at the wire edge, dispatched by table.

Every message type must survive the wire unchanged; a peer of another protocol version, an
unknown message type and a body that does not fit its type are refused with a ProtocolError
that names them (never a KeyError or AttributeError from inside a handler).
"""

from __future__ import annotations

import dataclasses
import pickle
import socket
import struct

import pytest

from flinkpy.network.connection import Connection
from flinkpy.protocol import PROTOCOL_VERSION, HandlerTable, Message, ProtocolError, decode, encode
from flinkpy.protocol import messages as m
from flinkpy.protocol.codec import _REGISTRY
from flinkpy.protocol.deployment import (
    ArtifactChunk,
    ArtifactUnavailable,
    DeployTask,
    FetchArtifact,
    InputGateDeployment,
    JobArtifact,
    ReleaseJob,
    ResultPartitionDeployment,
    TaskConfig,
    TaskDeploymentDescriptor,
)

pytestmark = pytest.mark.timeout(30)


def _descriptor() -> TaskDeploymentDescriptor:
    return TaskDeploymentDescriptor(
        job_id="j1",
        exec_id="2_0_1",
        vertex_id=2,
        vertex_name="Map -> Sink",
        subtask=0,
        parallelism=2,
        max_parallelism=128,
        attempt=1,
        payload=b"\x80\x05payload",
        inputs=[InputGateDeployment(edge_id=1, source_vertex=1, partitioner="hash", producers=[0, 1])],
        outputs=[ResultPartitionDeployment(edge_id=3, target_vertex=4, partitioner="forward", target_parallelism=2,
                                           target_max_parallelism=128, consumers=[0])],
        config=TaskConfig(buffer_timeout_ms=5, credit=6, state_backend={"state.backend.type": "rocksdb"}, checkpoint_dir="file:///tmp/c"),
        restore={"checkpoint_id": 7},
        artifact=JobArtifact(sha256="ab" * 32, size=652),
    )


SAMPLES: list[Message] = [
    DeployTask(_descriptor()),
    m.TriggerCheckpoint(m.CheckpointBarrier(3, 1000, kind="savepoint", directory="/sp", stop=True)),
    m.NotifyCheckpointComplete(3),
    m.NotifyCheckpointComplete(5, final=True),
    m.TriggerCheckpoint(m.CheckpointBarrier(5, 1000, final=True)),
    m.TaskEndOfData(),
    m.NotifyCheckpointAborted(4),
    m.CheckpointAck(3, [{"operator_id": "a", "keyed_state": None}], {"sync_ms": 1.0}),
    m.CheckpointDecline(4, "no", "trace"),
    m.InjectRaise("Map", 5),
    m.InjectDecline(2),
    m.InjectNetworkFault(drop=False, delay_ms=20.0, seconds=1.5),
    m.StorageOutage(until=12.5),
    m.KillTaskManager("TERM"),
    m.PauseTaskManager(0.5),
    m.KillTask("j1", "2_0_1", "KILL"),
    m.PauseTask("j1", "2_0_1", 1.0),
    m.ConnectTask("j1", "2_0_1", {"1:0": ("127.0.0.1", 4000)}),
    m.TaskListening("127.0.0.1", None, 42),
    m.TaskRunning(),
    m.TaskFinished({"records_in": 3}),
    m.TaskFailed("ValueError", "boom", "Traceback ...", "Map (1/2)"),
    m.RegisterTaskManager("tm-1", 7, "127.0.0.1", 2, "/log", "/out", epoch=3),
    m.Registered("tm-1"),
    m.ProbeStorage("p1", "file:///shared/checkpoints", "j1", marker=".flinkpy-probe-j1"),
    m.StorageProbed("p1", "tm-1", "cannot write file:///shared/checkpoints"),
    m.Refused("not the leader of epoch 2"),
    m.Heartbeat("tm-1", 3),
    m.TaskMetrics(1_000, {"numRecordsIn": 10, "busyTimeMsPerSecond": 250}, [{"name": "seen", "type": "counter", "value": 3}]),
    m.FinalCommitRequest(),
    m.FinalCommitAnswer(False, "the task is RUNNING in a RESTARTING job", retry=True),
    m.TaskManagerMetrics("tm-1", 1_000, {"Status.ProcessTree.Memory.RSS": 1 << 20}),
    m.CancelTask("j1", "2_0_1"),
    m.ToTask("j1", "2_0_1", m.NotifyCheckpointComplete(3)),
    m.FromTask("j1", "2_0_1", m.CheckpointDecline(4)),
    m.TaskStateChanged("j1", "2_0_1", "FAILED", {"message": "boom"}, "tm-1"),
    m.Shutdown(),
    m.LauncherReady(11),
    m.SpawnTask(0),
    m.TaskSpawned(0, 12),
    m.TaskExited(12, -9),
    FetchArtifact("j1", "ab" * 32),
    ArtifactChunk(b"PK\x03\x04", last=True),
    ArtifactUnavailable("no such archive"),
    ReleaseJob("j1"),
]


def test_every_registered_message_type_has_a_sample() -> None:
    sampled = {type(s) for s in SAMPLES}
    missing = [name for name, cls in _REGISTRY.items() if cls not in sampled and not name.startswith("example_")]
    assert missing == []


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda s: s.wire_name)
def test_every_message_survives_the_wire(msg: Message) -> None:
    assert decode(encode(msg)) == msg


def test_messages_travel_a_control_connection_in_order() -> None:
    left, right = socket.socketpair()
    a, b = Connection(left), Connection(right)
    try:
        for msg in SAMPLES:
            a.send(msg)
        assert [b.recv() for _ in SAMPLES] == SAMPLES
        a.close()
        assert b.recv() is None
    finally:
        b.close()


def _frame(version: int, name: str, fields: object) -> bytes:
    raw = name.encode()
    return struct.pack(">HB", version, len(raw)) + raw + pickle.dumps(fields)


def test_another_protocol_version_is_refused_by_name() -> None:
    with pytest.raises(ProtocolError, match=rf"'heartbeat' message of protocol version {PROTOCOL_VERSION + 1}.*speaks version {PROTOCOL_VERSION}"):
        decode(_frame(PROTOCOL_VERSION + 1, "heartbeat", {"tm_id": "x", "tasks": 0}))


def test_an_unknown_message_type_is_refused_by_name() -> None:
    with pytest.raises(ProtocolError, match="unknown type 'teleport'"):
        decode(_frame(PROTOCOL_VERSION, "teleport", {}))


def test_a_body_that_does_not_fit_its_type_is_refused() -> None:
    with pytest.raises(ProtocolError, match="cannot decode a 'heartbeat' message"):
        decode(_frame(PROTOCOL_VERSION, "heartbeat", {"tm": "x"}))
    with pytest.raises(ProtocolError, match="shorter than its header"):
        decode(b"\x00")


def test_a_connection_survives_a_message_it_cannot_decode() -> None:
    """The frame is consumed: the next message is read normally."""
    from flinkpy.network.connection import MESSAGE
    from flinkpy.network.framing import send_frame

    left, right = socket.socketpair()
    b = Connection(right)
    try:
        send_frame(left, MESSAGE, _frame(PROTOCOL_VERSION, "teleport", {}))
        send_frame(left, MESSAGE, encode(m.Heartbeat("tm-1", 0)))
        with pytest.raises(ProtocolError):
            b.recv()
        assert b.recv() == m.Heartbeat("tm-1", 0)
    finally:
        left.close()
        b.close()


def test_an_unregistered_dataclass_cannot_be_sent() -> None:
    @dataclasses.dataclass(frozen=True)
    class Stray(Message):
        x: int

    with pytest.raises(ProtocolError, match="Stray is not a registered message type"):
        encode(Stray(1))


def test_a_handler_table_dispatches_by_type_and_names_the_endpoint_when_it_cannot() -> None:
    seen: list[Message] = []
    table = HandlerTable("TaskManager tm-1", {m.Heartbeat: seen.append, m.Shutdown: lambda msg: True})
    assert table(m.Heartbeat("tm-1", 1)) is None and seen == [m.Heartbeat("tm-1", 1)]
    assert table(m.Shutdown()) is True
    assert m.Heartbeat in table and m.Refused not in table
    with pytest.raises(ProtocolError, match="TaskManager tm-1 does not handle 'refused' messages"):
        table(m.Refused("no"))


def test_the_descriptor_describes_its_subtask_as_flink_does() -> None:
    assert _descriptor().describe() == "Map -> Sink (1/2)"
