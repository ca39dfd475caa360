"""A cluster across hosts: throughput with and without TLS, and recovery after partitions
(``--only partitions``; root only: the hosts are network namespaces).

Each measurement runs on a drill cluster (:mod:`flinkpy.cluster.drill`): the JobManager and two
TaskManagers on hosts of their own, so that a job's data channels cross between hosts.

- **Throughput**: a keyed running count of 1..N at parallelism 2 (its records cross between the
  two TaskManagers' hosts), its net runtime (the CLI's "Job Runtime") with internal TLS off and
  on (``security.ssl.internal.*``, certificates made by trustme), in turns.
- **Recovery** (TLS off): an endless job checkpointing every 200 ms; the link between the
  JobManager and one TaskManager cut (``heartbeat.timeout`` 2 s): from the cut to every subtask
  RUNNING again on the other TaskManager; and the link between the two TaskManagers cut for
  3 s (``execution.checkpointing.timeout`` 2 s): from the cut to every subtask RUNNING again
  with a checkpoint completed after it, the job having restarted until the link healed.
- **JobManager failover by partition**: ZooKeeper, two JobManagers (high availability, session
  timeout 2 s) and a TaskManager each on a host; the leader cut off from ZooKeeper: from the cut
  to every subtask RUNNING under the other JobManager (the leader steps down when its session
  is suspended, the standby is elected when it expires). Needs a ZooKeeper installation.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, summary

#: the records the throughput job counts
COUNT = 2_000_000
#: the JobManager's heartbeat timeout on the drill cluster (how soon a cut TaskManager is lost)
HEARTBEAT_TIMEOUT = "2s"

ENDLESS = """
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.enable_checkpointing(200)
env.get_checkpoint_config().set_checkpoint_timeout(2000)
numbers = env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
(numbers.map(lambda n: (n % 2, 1)).key_by(lambda p: p[0]).sum(1).uid("sums").add_sink(lambda v: None))
env.execute("partition recovery benchmark")
"""


def keyed(n: int) -> tuple[int, int]:
    return (n % 64, 1)


def add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return (a[0], a[1] + b[1])


def build_count(count: int) -> Callable[[Any], None]:
    def build(env: Any) -> None:
        from flinkpy.common import WatermarkStrategy
        from flinkpy.datastream.connectors import NumberSequenceSource

        numbers = env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers")
        numbers.map(keyed).key_by(lambda p: p[0]).reduce(add).add_sink(lambda v: None)

    return build


def unavailable() -> str | None:
    """Why this part cannot run here (None when it can)."""
    from flinkpy.cluster.netns import unavailable as no_namespaces

    reason = no_namespaces()
    if reason is not None:
        return reason
    try:
        import trustme  # noqa: F401
    except ImportError:
        return "trustme is not installed (pip install trustme, or the test extra)"
    return None


def measure(runs: int, run_job: Callable[..., float], log: Callable[[str], None], *, quick: bool = False) -> dict[str, Any]:
    count = COUNT // (10 if quick else 1)
    result: dict[str, Any] = {"records": count, "tls_off_s": [], "tls_on_s": []}
    with tempfile.TemporaryDirectory() as tmp:
        pem = _certificates(Path(tmp) / "pem")
        for i in range(runs):
            for tls in (False, True):
                log(f"partitions: throughput across namespace hosts, TLS {'on' if tls else 'off'}, run {i + 1} ...")
                with _drill(Path(tmp) / f"t{i}-{int(tls)}", pem if tls else None) as (address, token, _):
                    result["tls_on_s" if tls else "tls_off_s"].append(run_job(address, token, build_count(count), 2, "partitions-throughput"))
        result["tls_ratios"] = [off / on for off, on in zip(result["tls_off_s"], result["tls_on_s"])]
        result["tls_vs_off"] = statistics.median(result["tls_ratios"])
        result["rate_off"] = count / statistics.median(result["tls_off_s"])
        result["rate_on"] = count / statistics.median(result["tls_on_s"])
        log("partitions: recovery after partitions ...")
        # two slots a TaskManager: the job restarts on the one the JobManager still reaches
        with _drill(Path(tmp) / "jm-tm", None) as (address, token, home):
            jid = _submit_endless(home, Path(tmp))
            result["jm_tm_ms"] = [_recover_from(home, address, token, jid, "jobmanager", None, log) for _ in range(runs)]
        # one slot a TaskManager: the job's two pipelines run on both, and talk across the cut
        with _drill(Path(tmp) / "tm-tm", None, slots=1) as (address, token, home):
            jid = _submit_endless(home, Path(tmp))
            result["tm_tm_ms"] = [_recover_from(home, address, token, jid, "tm-1", 3.0, log, other="tm-2") for _ in range(runs)]
        from flinkpy.ha.zookeeper_server import find_installation

        try:
            find_installation(None)
        except Exception as e:  # noqa: BLE001 - no ZooKeeper here: the other figures stand
            log(f"partitions: JobManager failover by partition skipped ({e})")
        else:
            log("partitions: the leading JobManager cut off from ZooKeeper ...")
            result["session_timeout_s"] = SESSION_TIMEOUT_S
            result["jm_zk_ms"] = _zookeeper_failovers(Path(tmp) / "ha", runs, log)
    return result


# -- the drill cluster ----------------------------------------------------------------------


class _drill:
    """A drill cluster of three hosts in ``home`` (internal TLS from ``pem`` when given)."""

    def __init__(self, home: Path, pem: tuple[str, str] | None, slots: int = 2) -> None:
        self.home, self.pem, self.slots = home, pem, slots

    def __enter__(self) -> tuple[str, str, Path]:
        from flinkpy.cluster import ClusterHome
        from flinkpy.cluster.drill import start_drill_cluster
        from flinkpy.config import load_config

        self.home.mkdir(parents=True)
        if self.pem is not None:
            keystore, truststore = self.pem
            (self.home / "flinkpy.yaml").write_text(f"security.ssl.internal.enabled: true\nsecurity.ssl.internal.keystore: {keystore}\n"
                                                    f"security.ssl.internal.truststore: {truststore}\n")
        config = load_config(self.home, env={}, overrides={"heartbeat.interval": "300ms", "heartbeat.timeout": HEARTBEAT_TIMEOUT})
        self.cluster_home = ClusterHome(self.home)
        info = start_drill_cluster(self.cluster_home, hosts=3, slots=self.slots, rest_port=0, config=config)
        return info.rest_address, self.cluster_home.token(), self.home

    def __exit__(self, *exc: object) -> None:
        from flinkpy.cluster import stop_cluster

        stop_cluster(self.cluster_home, timeout_s=10)


def _certificates(directory: Path) -> tuple[str, str]:
    import trustme

    directory.mkdir(parents=True)
    ca = trustme.CA()
    keystore, truststore = directory / "node.pem", directory / "ca.pem"
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    ca.cert_pem.write_to_path(str(truststore))
    return str(keystore), str(truststore)


def _submit_endless(home: Path, tmp: Path, address: str | None = None) -> str:
    """The endless job, submitted to the cluster of ``home`` (or the JobManager at ``address``)."""
    from flinkpy.client.program import run_program

    job = tmp / "endless.py"
    job.write_text(ENDLESS)
    saved = {k: os.environ.get(k) for k in ("FLINKPY_HOME", "FLINKPY_JOBMANAGER")}
    os.environ["FLINKPY_HOME"] = str(home)
    os.environ.pop("FLINKPY_JOBMANAGER", None)
    try:
        (submitted,) = run_program(str(job), [], detached=True, address=address)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return submitted.job_id


def _recover_from(home: Path, address: str, token: str, jid: str, a: str, heal_after_s: float | None, log: Callable[[str], None],
                  other: str = "") -> float:
    """Cut ``a`` from ``other`` (the TaskManager running subtask 0 when ``a`` is the
    JobManager), heal after ``heal_after_s`` (at once once recovered when None); the ms from
    the cut until every subtask runs again and a checkpoint completed after the cut."""
    from flinkpy.cluster import drill
    from flinkpy.network.rest_client import RestClient

    rest = RestClient(address, token)
    _wait(lambda: _running(rest, jid) is not None and rest.request("GET", f"/jobs/{jid}/checkpoints")["counts"]["completed"] >= 2, 120)
    if not other:
        other = next(s["taskmanager-id"] for v in rest.job(jid)["vertices"] for s in v["subtasks"])
    before = rest.request("GET", f"/jobs/{jid}/checkpoints")["counts"]["completed"]
    restarts = rest.job(jid)["restarts"]
    cut_ms = time.time() * 1000
    drill.partition(home, a, other)
    try:
        if heal_after_s is not None:
            time.sleep(heal_after_s)
            drill.heal(home)

        def recovered() -> float | None:
            doc = rest.job(jid)
            if doc["restarts"] <= restarts or rest.request("GET", f"/jobs/{jid}/checkpoints")["counts"]["completed"] <= before:
                return None
            return _running(rest, jid, after_ms=cut_ms)

        running_ms = _wait(recovered, 120)
    finally:
        drill.heal(home)
    took = running_ms - cut_ms
    log(f"partitions: {a} cut from {other}: running again {took:.0f} ms after the cut")
    # the cut-off TaskManager registers again before the next measurement
    _wait(lambda: rest.overview()["taskmanagers"] >= 2 or None, 120)
    return took


def _running(rest: Any, jid: str, after_ms: float = 0) -> float | None:
    """When the last subtask of ``jid`` switched to RUNNING (epoch ms), if all run, after ``after_ms``."""
    doc = rest.job(jid)
    subs = [s for v in doc["vertices"] for s in v["subtasks"]]
    if doc["state"] != "RUNNING" or not all(s["status"] == "RUNNING" for s in subs):
        return None
    last = max(s["timestamps"].get("RUNNING", 0) for s in subs)
    return last if last > after_ms else None


def _wait(predicate: Callable[[], Any], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got = predicate()
        except Exception:  # noqa: BLE001 - a JobManager busy with the failover answers late
            got = None
        if got:
            return got
        time.sleep(0.05)
    raise TimeoutError(f"not within {timeout_s:.0f} s")


# -- the JobManager cut off from ZooKeeper ----------------------------------------------------

#: the ZooKeeper session timeout of the JobManagers in the failover measurement
SESSION_TIMEOUT_S = 2.0


def _zookeeper_failovers(base: Path, runs: int, log: Callable[[str], None]) -> list[float]:
    """ZooKeeper, two JobManagers and a TaskManager on hosts of their own; each run cuts the
    leader off from ZooKeeper and times the job's recovery under the other JobManager."""
    from flinkpy.cluster.ha_hosts import HaHosts
    from flinkpy.cluster.netns import Hosts
    from flinkpy.network.rest_client import RestClient

    hosts = Hosts(gateway=True)
    try:
        for name in ("zk", "jm1", "jm2", "tm"):
            hosts.add(name)
        with HaHosts(hosts, base, cluster_id="bench", session_timeout_s=SESSION_TIMEOUT_S) as cluster:
            for jm in ("jm1", "jm2"):
                cluster.start_jobmanager(jm)
                _wait(lambda: cluster.has_started(jm), 60)
            cluster.start_taskmanager("tm", slots=2)

            def rest(jm: str) -> Any:
                return RestClient(cluster.rest_address(jm), cluster.token(), timeout_s=2)

            def leader() -> str | None:
                for jm in ("jm1", "jm2"):
                    try:
                        if rest(jm).overview()["taskmanagers"] >= 1:
                            return jm
                    except Exception:  # noqa: BLE001 - a standby answers 503
                        pass
                return None

            first = _wait(leader, 120)
            jid = _submit_endless(cluster.home, base, cluster.rest_address(first))
            times = []
            for _ in range(runs):
                old = _wait(leader, 120)
                new = "jm2" if old == "jm1" else "jm1"
                _wait(lambda: _running(rest(old), jid) is not None, 120)
                cut_ms = time.time() * 1000
                hosts.partition(old, "zk")
                try:
                    running_ms = _wait(lambda: _running(rest(new), jid, after_ms=cut_ms), 120)
                finally:
                    hosts.rejoin(old, "zk")
                times.append(running_ms - cut_ms)
                log(f"partitions: {old} cut off from ZooKeeper: the job running under {new} {times[-1]:.0f} ms after the cut")
            return times
    finally:
        hosts.close()


# -- report -----------------------------------------------------------------------------------


def report(result: dict[str, Any]) -> list[str]:
    if not result:
        return []
    return [
        f"across namespace hosts, keyed count of {result['records']:,} at p=2: TLS off {result['rate_off'] / 1e3:.0f} k records/s, "
        f"on {result['rate_on'] / 1e3:.0f} k records/s ({result['tls_vs_off']:.2f} of off)",
        f"JobManager cut from a TaskManager (heartbeat.timeout {HEARTBEAT_TIMEOUT}): running again after "
        f"{statistics.median(result['jm_tm_ms']):.0f} ms median ({', '.join(f'{t:.0f}' for t in result['jm_tm_ms'])})",
        f"two TaskManagers cut for 3 s: running again with a checkpoint after {statistics.median(result['tm_tm_ms']):.0f} ms "
        f"median ({', '.join(f'{t:.0f}' for t in result['tm_tm_ms'])})",
    ] + ([f"leading JobManager cut off from ZooKeeper (session timeout {result['session_timeout_s']:g} s): the job running under "
          f"the other after {statistics.median(result['jm_zk_ms']):.0f} ms median ({', '.join(f'{t:.0f}' for t in result['jm_zk_ms'])})"]
         if result.get("jm_zk_ms") else [])


def figures(result: dict[str, Any]) -> list[Figure]:
    """Table ``partitions``: TLS's cost across hosts and the recovery after each partition kind."""
    if not result:
        return []
    row = f"keyed count of {result['records']:,} at p=2 across namespace hosts"
    out = summary("partitions", row, "records/s, TLS off", [result["records"] / s for s in result["tls_off_s"]], Unit.RECORDS_PER_S)
    out += summary("partitions", row, "records/s, TLS on", [result["records"] / s for s in result["tls_on_s"]], Unit.RECORDS_PER_S)
    out += summary("partitions", row, "TLS on / off", result["tls_ratios"], Unit.RATIO)
    out += summary("partitions", f"JobManager cut from a TaskManager (heartbeat.timeout {HEARTBEAT_TIMEOUT})",
                   "cut to running again", result["jm_tm_ms"], Unit.MS)
    out += summary("partitions", "two TaskManagers cut from each other for 3 s (checkpoint timeout 2 s)",
                   "cut to running again with a checkpoint", result["tm_tm_ms"], Unit.MS)
    if result.get("jm_zk_ms"):
        out += summary("partitions", f"leading JobManager cut off from ZooKeeper (session timeout {result['session_timeout_s']:g} s)",
                       "cut to running again", result["jm_zk_ms"], Unit.MS)
    return out
