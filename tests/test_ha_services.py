"""The ZooKeeper HA services against a real server: election, the leader node, fenced writes,
job and checkpoint pointers, histories — and a TaskManager registration with a stale epoch."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from conftest import wait_for
from flinkpy.ha.services import FencedError, HaConfig, LeaderFollower, ZooKeeperHa


@pytest.fixture
def ha_config(zookeeper, tmp_path: Path) -> HaConfig:
    return HaConfig(quorum=zookeeper.quorum, cluster_id="services", storage_dir=str(tmp_path / "ha"), session_timeout_s=1.0)


def lead_in_thread(ha: ZooKeeperHa, name: str, elected: threading.Event, release: threading.Event) -> threading.Thread:
    def lead() -> None:
        ha.publish_leader({"id": name, "epoch": ha.next_epoch()})
        elected.set()
        release.wait(30)

    def run() -> None:
        try:
            ha.run_election(name, lead)
        except Exception:  # noqa: BLE001 - the session was closed under the election (a's "death")
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.timeout(30)
def test_one_leader_at_a_time_and_the_next_takes_over_with_a_new_epoch(ha_config: HaConfig) -> None:
    a, b = ZooKeeperHa(ha_config).start(), ZooKeeperHa(ha_config).start()
    observer = ZooKeeperHa(ha_config).start()
    follower = LeaderFollower(observer)
    a_elected, b_elected, release = threading.Event(), threading.Event(), threading.Event()
    ta = lead_in_thread(a, "a", a_elected, release)
    assert a_elected.wait(10)
    tb = lead_in_thread(b, "b", b_elected, release)
    assert not b_elected.wait(0.5), "two leaders at once"
    first = wait_for(lambda: follower.current, timeout=5, message="the leader seen by a follower")
    assert first["id"] == "a"
    a.stop()  # a's session ends: its election node and leader node go with it
    assert b_elected.wait(10)
    second = wait_for(lambda: (follower.current or {}).get("id") == "b" and follower.current, timeout=5, message="b as leader")
    assert second["epoch"] > first["epoch"]
    release.set()
    ta.join(10)
    tb.join(10)
    for client in (b, observer):
        client.stop()


@pytest.mark.timeout(30)
def test_a_deposed_leader_cannot_write(ha_config: HaConfig) -> None:
    ha = ZooKeeperHa(ha_config).start()
    done = threading.Event()

    def lead() -> None:
        ha.publish_leader({"id": "x", "epoch": ha.next_epoch()})
        ha.put_job("j1", {"meta": {"vertices": []}, "payloads": {}})
        ha.reserve_checkpoint_id("j1", 7)
        for cid in (5, 6, 7):
            ha.add_checkpoint("j1", cid, f"/cp/j1/chk-{cid}", retained=2)
        ha.save_history("j1", b"history")
        # another session takes the leader node away: every later write is refused
        ha.zk.delete(f"{ha_config.base}/leader")
        for write in (lambda: ha.put_job("j2", {}), lambda: ha.reserve_checkpoint_id("j1", 8),
                      lambda: ha.add_checkpoint("j1", 8, "/cp/j1/chk-8", retained=2), lambda: ha.remove_job("j1")):
            with pytest.raises(FencedError):
                write()
        done.set()

    ha.run_election("x", lead)
    assert done.is_set()
    assert ha.job_ids() == ["j1"]
    assert ha.get_job("j1")["meta"] == {"vertices": []}
    assert ha.checkpoint_counter("j1") == 7
    assert ha.latest_checkpoint("j1") == (7, "/cp/j1/chk-7")
    assert sorted(ha.zk.get_children(f"{ha_config.base}/checkpoints/j1")) == [f"{6:019d}", f"{7:019d}"]
    assert ha.load_history("j1") == b"history"
    ha.stop()


@pytest.mark.timeout(30)
def test_a_taskmanager_of_another_epoch_is_turned_away(ha_config: HaConfig) -> None:
    """Fencing on the RPC side: the dispatcher of epoch 3 refuses a registration for epoch 2."""
    import socket

    from flinkpy.jobmanager.dispatcher import Dispatcher
    from flinkpy.network.connection import Connection
    from flinkpy.protocol.messages import Refused, RegisterTaskManager

    d = Dispatcher()
    d.ha = object()  # any HA object: only its presence matters here
    d.leader_epoch = 3
    left, right = socket.socketpair()
    jm_side, tm_side = Connection(left), Connection(right)
    d.register_taskmanager(jm_side, RegisterTaskManager(tm_id="tm-x", pid=1, host="127.0.0.1", slots=1, epoch=2))
    answer = tm_side.recv()
    assert isinstance(answer, Refused) and "epoch 2" in answer.reason
    assert tm_side.recv() is None  # the connection is closed
    assert "tm-x" not in d.taskmanagers
    tm_side.close()
