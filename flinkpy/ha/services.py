"""High-availability services on ZooKeeper (kazoo): leader election, the leader's address, and
what a new leader needs to take over the jobs.

Layout under ``<path.root>/<cluster-id>`` (Flink's, in spirit)::

    leaderlatch/          the election (kazoo's Election recipe: sequential ephemeral nodes)
    leader                ephemeral; JSON of the leader: id, REST and RPC addresses, pid, epoch
    epoch                 a counter: every leadership term takes the next value (fencing token)
    jobgraphs/<job id>    pointer (JSON) to the job's submission in high-availability.storageDir
    checkpoints/<job id>/<checkpoint id, 19 digits>   pointer to a completed checkpoint's directory
    checkpoint-counter/<job id>                       the highest checkpoint id handed out

The big data — submissions (the job's code), histories — lives in ``high-availability.storageDir``
(any fsspec URL); ZooKeeper holds pointers only. Writes a leader makes on behalf of its jobs are
*fenced*: each is a ZooKeeper transaction that also checks that this JobManager's ``leader`` node
still exists at the version it created, so a JobManager that lost its session (and with it the
ephemeral node) cannot write anything, even before it has noticed.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable

import fsspec

from flinkpy.errors import ClusterUnreachableError, ConfigurationError, FlinkpyError

log = logging.getLogger("flinkpy.ha")


class FencedError(FlinkpyError):
    """This JobManager is no longer the leader: its write was refused by ZooKeeper."""


@dataclass(frozen=True)
class HaConfig:
    quorum: str
    root: str = "/flinkpy"
    cluster_id: str = "default"
    storage_dir: str = ""
    session_timeout_s: float = 4.0
    connection_timeout_s: float = 15.0

    @property
    def base(self) -> str:
        return f"{self.root.rstrip('/')}/{self.cluster_id}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "quorum": self.quorum, "root": self.root, "cluster_id": self.cluster_id, "storage_dir": self.storage_dir,
            "session_timeout_s": self.session_timeout_s, "connection_timeout_s": self.connection_timeout_s,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HaConfig:
        return cls(**{k: d[k] for k in ("quorum", "root", "cluster_id", "storage_dir", "session_timeout_s", "connection_timeout_s") if k in d})

    @classmethod
    def from_config(cls, config: Any, default_storage_dir: str) -> HaConfig | None:
        """From a flinkpy Config (or a dict of strings): None unless high-availability.type is zookeeper."""
        from flinkpy.config import Config, load_config

        if not isinstance(config, Config):
            config = load_config(env={}, overrides={k: v for k, v in dict(config).items() if k.startswith("high-availability.")})
        if str(config.get("high-availability.type")).lower() != "zookeeper":
            return None
        quorum = config.get("high-availability.zookeeper.quorum")
        if not quorum:
            raise ConfigurationError(
                "high-availability.type is zookeeper but high-availability.zookeeper.quorum is not set",
                remedy="pass --zookeeper-quorum HOST:PORT (see 'flinkpy zookeeper start'), or set the key in flinkpy.yaml",
            )
        root = config.get("high-availability.zookeeper.path.root")
        if not root.startswith("/"):
            raise ConfigurationError(f"high-availability.zookeeper.path.root must start with '/', got {root!r}")
        return cls(
            quorum=quorum,
            root=root,
            cluster_id=config.get("high-availability.cluster-id"),
            storage_dir=config.get("high-availability.storageDir") or default_storage_dir,
            session_timeout_s=config.get("high-availability.zookeeper.client.session-timeout") / 1000.0,
            connection_timeout_s=config.get("high-availability.zookeeper.client.connection-timeout") / 1000.0,
        )


def _json(data: bytes) -> Any:
    return json.loads(data.decode()) if data else None


class ZooKeeperHa:
    """One ZooKeeper session and the operations of a JobManager, a TaskManager or the CLI."""

    def __init__(self, cfg: HaConfig, *, client: bool = False) -> None:
        """``client``: a short-lived session of the CLI's — kazoo's connection chatter is kept
        off the operator's terminal."""
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        if client:
            logging.getLogger("flinkpy.ha.kazoo").setLevel(logging.CRITICAL)
        self.cfg = cfg
        self.zk = KazooClient(
            hosts=cfg.quorum,
            timeout=cfg.session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5),
            command_retry=KazooRetry(max_tries=3, delay=0.05, max_delay=0.5),
            logger=logging.getLogger("flinkpy.ha.kazoo"),
        )
        self._leader_version: int | None = None

    # -- session ------------------------------------------------------------------------------

    def start(self) -> ZooKeeperHa:
        try:
            self.zk.start(timeout=self.cfg.connection_timeout_s)
        except Exception as e:  # kazoo raises its own timeout type
            self.zk.stop()
            self.zk.close()
            raise ClusterUnreachableError(
                f"cannot reach ZooKeeper at {self.cfg.quorum} within {self.cfg.connection_timeout_s:.0f}s ({type(e).__name__})",
                remedy="start it with 'flinkpy zookeeper start', or check high-availability.zookeeper.quorum",
            ) from None
        for path in ("leaderlatch", "jobgraphs", "checkpoints", "checkpoint-counter"):
            self.zk.ensure_path(f"{self.cfg.base}/{path}")
        return self

    def start_patiently(self, what: str) -> ZooKeeperHa:
        """Like :meth:`start`, but waits for ZooKeeper as long as it takes (a JobManager or
        TaskManager restarted during a ZooKeeper outage waits for it to come back)."""
        while True:
            try:
                return self.start()
            except ClusterUnreachableError as e:
                log.warning("%s waits for ZooKeeper: %s", what, e.message)
                from kazoo.client import KazooClient
                from kazoo.retry import KazooRetry

                self.zk = KazooClient(
                    hosts=self.cfg.quorum, timeout=self.cfg.session_timeout_s,
                    connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5),
                    command_retry=KazooRetry(max_tries=3, delay=0.05, max_delay=0.5),
                    logger=logging.getLogger("flinkpy.ha.kazoo"),
                )

    def stop(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # noqa: BLE001 - closing a broken session
            pass

    def on_session_change(self, fn: Callable[[str], None]) -> None:
        """``fn(state)`` with state CONNECTED, SUSPENDED or LOST (from kazoo's thread)."""
        self.zk.add_listener(lambda state: fn(str(state)))

    def session_info(self) -> dict[str, Any]:
        sid = self.zk.client_id[0] if self.zk.client_id else None
        return {"state": str(self.zk.state), "session_id": f"0x{sid:x}" if sid else None, "quorum": self.cfg.quorum,
                "session_timeout_s": self.cfg.session_timeout_s}

    # -- leadership ---------------------------------------------------------------------------

    def run_election(self, identifier: str, lead: Callable[[], None]) -> None:
        """Block until this process is elected, then run ``lead`` (leadership lasts while it runs)."""
        self.zk.Election(f"{self.cfg.base}/leaderlatch", identifier).run(lead)

    def next_epoch(self) -> int:
        counter = self.zk.Counter(f"{self.cfg.base}/epoch")
        counter += 1
        return int(counter.value)

    def publish_leader(self, info: dict[str, Any]) -> None:
        """Create the ephemeral ``leader`` node (only the election's winner calls this)."""
        from kazoo.exceptions import NodeExistsError

        path = f"{self.cfg.base}/leader"
        data = json.dumps(info).encode()
        try:
            self.zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            # the node of a predecessor whose session has not expired yet cannot exist while we
            # hold the election lock — unless it was ours (a retried create): replace it
            self.zk.delete(path)
            self.zk.create(path, data, ephemeral=True)
        self._leader_version = self.zk.exists(path).version

    def leader(self) -> dict[str, Any] | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.get(f"{self.cfg.base}/leader")
        except NoNodeError:
            return None
        return _json(data)

    def watch_leader(self, fn: Callable[[dict[str, Any] | None], None]) -> None:
        """``fn(leader info or None)`` now and at every change of the leader node."""
        self.zk.DataWatch(f"{self.cfg.base}/leader", lambda data, stat: fn(_json(data) if data else None))

    def _fenced(self, *ops: Callable[[Any], None]) -> None:
        """Run ``ops`` on a transaction that also checks our leader node: all or nothing."""
        if self._leader_version is None:
            raise FencedError("this JobManager is not the leader")
        t = self.zk.transaction()
        t.check(f"{self.cfg.base}/leader", self._leader_version)
        for op in ops:
            op(t)
        results = t.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise FencedError(f"ZooKeeper refused the write of a JobManager that is no longer the leader ({type(failures[0]).__name__})")

    # -- submitted jobs -----------------------------------------------------------------------

    def _storage(self, *parts: str) -> str:
        return "/".join([self.cfg.storage_dir.rstrip("/"), self.cfg.cluster_id, *parts])

    def put_job(self, job_id: str, document: dict[str, Any]) -> None:
        """Keep a submission (meta, code, restore point) where a new leader finds it."""
        url = self._storage("jobs", job_id, "submission.json")
        fs, path = fsspec.core.url_to_fs(url)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "wb") as f:
            f.write(json.dumps(document).encode())
        pointer = json.dumps({"submission": url}).encode()
        self._fenced(lambda t: t.create(f"{self.cfg.base}/jobgraphs/{job_id}", pointer))

    def remove_job(self, job_id: str) -> None:
        """The job reached a globally terminal state: no new leader may recover it."""
        from kazoo.exceptions import NoNodeError

        base = self.cfg.base
        ops: list[Callable[[Any], None]] = []
        try:
            children = self.zk.get_children(f"{base}/checkpoints/{job_id}")
        except NoNodeError:
            children = None
        for child in children or []:
            ops.append(lambda t, c=child: t.delete(f"{base}/checkpoints/{job_id}/{c}"))
        if children is not None:
            ops.append(lambda t: t.delete(f"{base}/checkpoints/{job_id}"))
        if self.zk.exists(f"{base}/checkpoint-counter/{job_id}"):
            ops.append(lambda t: t.delete(f"{base}/checkpoint-counter/{job_id}"))
        if self.zk.exists(f"{base}/jobgraphs/{job_id}"):
            ops.append(lambda t: t.delete(f"{base}/jobgraphs/{job_id}"))
        if ops:
            self._fenced(*ops)
        fs, path = fsspec.core.url_to_fs(self._storage("jobs", job_id))
        try:
            fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    def job_ids(self) -> list[str]:
        return sorted(self.zk.get_children(f"{self.cfg.base}/jobgraphs"))

    def get_job(self, job_id: str) -> dict[str, Any]:
        pointer = _json(self.zk.get(f"{self.cfg.base}/jobgraphs/{job_id}")[0])
        fs, path = fsspec.core.url_to_fs(pointer["submission"])
        with fs.open(path, "rb") as f:
            return json.loads(f.read().decode())

    # -- checkpoints --------------------------------------------------------------------------

    def reserve_checkpoint_id(self, job_id: str, checkpoint_id: int) -> None:
        """Record that ``checkpoint_id`` was handed out, so a new leader continues after it."""
        from kazoo.exceptions import NoNodeError

        path = f"{self.cfg.base}/checkpoint-counter/{job_id}"
        data = str(checkpoint_id).encode()
        try:
            current = int(self.zk.get(path)[0] or b"0")
        except NoNodeError:
            self._fenced(lambda t: t.create(path, data))
            return
        if checkpoint_id > current:
            self._fenced(lambda t: t.set_data(path, data))

    def checkpoint_counter(self, job_id: str) -> int:
        from kazoo.exceptions import NoNodeError

        try:
            return int(self.zk.get(f"{self.cfg.base}/checkpoint-counter/{job_id}")[0] or b"0")
        except NoNodeError:
            return 0

    def add_checkpoint(self, job_id: str, checkpoint_id: int, directory: str, retained: int) -> None:
        """Point at a completed checkpoint; drop pointers beyond the ``retained`` newest."""
        from kazoo.exceptions import NoNodeError

        base = f"{self.cfg.base}/checkpoints/{job_id}"
        self.zk.ensure_path(base)
        try:
            existing = sorted(self.zk.get_children(base))
        except NoNodeError:
            existing = []
        name = f"{checkpoint_id:019d}"
        ops: list[Callable[[Any], None]] = [lambda t: t.create(f"{base}/{name}", json.dumps({"directory": directory}).encode())]
        keep = sorted(existing + [name])[-retained:]
        for old in existing:
            if old not in keep:
                ops.append(lambda t, o=old: t.delete(f"{base}/{o}"))
        self._fenced(*ops)

    def latest_checkpoint(self, job_id: str) -> tuple[int, str] | None:
        from kazoo.exceptions import NoNodeError

        base = f"{self.cfg.base}/checkpoints/{job_id}"
        try:
            children = sorted(self.zk.get_children(base))
        except NoNodeError:
            return None
        if not children:
            return None
        data = _json(self.zk.get(f"{base}/{children[-1]}")[0])
        return int(children[-1]), data["directory"]

    # -- histories (survive a failover, unlike Flink's) ------------------------------------------

    def save_history(self, job_id: str, data: bytes) -> None:
        """The job's histories (checkpoints, exceptions, restarts) as the JobManager serialized
        them; written whole, then renamed into place."""
        url = self._storage("jobs", job_id, "history.bin")
        fs, path = fsspec.core.url_to_fs(url)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        tmp = f"{path}.{socket.gethostname()}.{threading.get_ident()}.tmp"
        with fs.open(tmp, "wb") as f:
            f.write(data)
        fs.mv(tmp, path)

    def load_history(self, job_id: str) -> bytes | None:
        fs, path = fsspec.core.url_to_fs(self._storage("jobs", job_id, "history.bin"))
        try:
            with fs.open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None


class LeaderFollower:
    """Keeps the latest leader info from a watch; ``wait_for_change`` blocks until it differs."""

    def __init__(self, ha: ZooKeeperHa) -> None:
        self._cond = threading.Condition()
        self.current: dict[str, Any] | None = None
        ha.watch_leader(self._update)

    def _update(self, info: dict[str, Any] | None) -> None:
        with self._cond:
            self.current = info
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[dict[str, Any] | None], bool], timeout_s: float | None = None) -> dict[str, Any] | None:
        with self._cond:
            self._cond.wait_for(lambda: predicate(self.current), timeout=timeout_s)
            return self.current
