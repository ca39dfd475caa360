"""Hosts made of Linux network namespaces on one bridge, whose links can be cut, healed and
throttled: what partition drills run on (``flinkpy cluster start --hosts N``, ``flinkpy fault
partition``, and the partition tests).

Each :class:`Host` is a network namespace with its own address on a private /24, joined to a
bridge in the root namespace by a veth pair. :meth:`Hosts.cut` sets the bridge's end of a host's
pair down: packets to and from it are dropped, so connections from the other hosts time out as
in a real partition (nothing answers with a reset); :meth:`Hosts.heal` sets it up again.
:meth:`Hosts.throttle` puts a token bucket (``tbf``) on that end (this kernel has no ``netem``:
delay and loss come from flinkpy's own ``fault network``). With ``gateway`` the bridge gets the
subnet's first address, so that this host's root namespace (the operator's CLI) reaches every
namespace host; otherwise keep both ends of a connection inside namespaces.

The file system is shared: every host sees the same cluster homes, checkpoint directories and
job output, as hosts with a shared mount would. :meth:`Hosts.record` and :meth:`Hosts.attach`
let a later process (``fault partition``, ``cluster stop``) act on hosts another one made.

Needs root and ``ip`` (and ``tc`` for throttles and partitions); :func:`unavailable` says why
namespaces cannot be made here.

>>> names = HostNames("a1b2")
>>> names.bridge, names.veth(3), names.namespace(3)
('fpb-a1b2', 'fpv-a1b2-3', 'fpns-a1b2-3')
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"fpns-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"'ip netns add' failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class HostNames:
    """Interface and namespace names of one set of hosts (at most 15 characters each)."""

    tag: str

    @property
    def bridge(self) -> str:
        return f"fpb-{self.tag}"

    def veth(self, n: int) -> str:
        return f"fpv-{self.tag}-{n}"

    def namespace(self, n: int) -> str:
        return f"fpns-{self.tag}-{n}"


@dataclass
class Host:
    """One host: a namespace, its address, and the bridge's end of its link."""

    name: str
    namespace: str
    address: str
    link: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    def command(self, *argv: str) -> list[str]:
        """``argv`` run inside this host."""
        return ["ip", "netns", "exec", self.namespace, *argv]


class Hosts:
    """A set of namespace hosts on one bridge; :meth:`close` removes all of it."""

    def __init__(self, seed: int | None = None, *, gateway: bool = False, create: bool = True) -> None:
        self.seed = seed if seed is not None else random.randrange(1 << 30)
        rng = random.Random(self.seed)
        self.names = HostNames(f"{rng.randrange(1 << 16):04x}")
        self.subnet = f"10.{rng.randrange(200, 250)}.{rng.randrange(0, 256)}"
        self.gateway = gateway
        self.hosts: dict[str, Host] = {}
        if not create:
            return
        # logged, so that a run's names and subnet can be found again (and repeated with seed=)
        print(f"netns hosts: seed {self.seed}, bridge {self.names.bridge}, subnet {self.subnet}.0/24", file=sys.stderr)
        _ip("link", "add", self.names.bridge, "type", "bridge")
        if gateway:
            _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.names.bridge)
        _ip("link", "set", self.names.bridge, "up")

    def record(self) -> dict[str, object]:
        """What :meth:`attach` needs to act on these hosts from another process."""
        return {"seed": self.seed, "gateway": self.gateway,
                "hosts": [{"name": h.name, "namespace": h.namespace, "address": h.address, "link": h.link} for h in self.hosts.values()]}

    @classmethod
    def attach(cls, record: dict[str, Any]) -> Hosts:
        """The hosts of ``record`` (made by another process), to cut, heal or remove."""
        made = cls(int(record["seed"]), gateway=bool(record.get("gateway")), create=False)
        for h in record["hosts"]:
            made.hosts[h["name"]] = Host(h["name"], h["namespace"], h["address"], h["link"])
        return made

    def add(self, name: str) -> Host:
        n = len(self.hosts) + 1
        ns, veth, peer = self.names.namespace(n), self.names.veth(n), f"fpp-{self.names.tag}-{n}"
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", veth, "master", self.names.bridge)
        _ip("link", "set", veth, "up")
        _ip("link", "set", peer, "netns", ns)
        address = f"{self.subnet}.{n + 1}"
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "set", peer, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        host = Host(name, ns, address, veth)
        self.hosts[name] = host
        return host

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def cut(self, name: str) -> None:
        """Partition ``name`` from every other host (its packets are dropped, not refused)."""
        _ip("link", "set", self.hosts[name].link, "down")

    def heal(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].link, "up")

    def throttle(self, name: str, rate: str = "1mbit", burst: str = "32kbit", latency: str = "400ms") -> None:
        """Limit what ``name`` receives from the others to ``rate`` (a token bucket, ``tbf``)."""
        subprocess.run(["tc", "qdisc", "replace", "dev", self.hosts[name].link, "root", "tbf", "rate", rate, "burst", burst,
                        "latency", latency], check=True, capture_output=True, timeout=10)

    def unthrottle(self, name: str) -> None:
        subprocess.run(["tc", "qdisc", "del", "dev", self.hosts[name].link, "root"], capture_output=True, timeout=10)

    def partition(self, a: str, b: str) -> None:
        """Cut ``a`` and ``b`` off from each other only, both keeping their links to the rest.

        No drop action is available here (no ``gact``, no iptables), so what each receives from
        the other is classified (``u32``) into an ``htb`` class of 8 bit/s with a one-packet
        queue: after at most one packet it is dropped, silently, as in a real partition. A link
        may be cut from several hosts at once: each cut is one filter, numbered (its ``prio``)
        by the host it drops, so that :meth:`rejoin` lifts that cut alone. It takes the place
        of :meth:`throttle` on both links."""
        for into, source in ((a, b), (b, a)):
            link = self.hosts[into].link
            shown = subprocess.run(["tc", "qdisc", "show", "dev", link, "root"], capture_output=True, text=True, timeout=10).stdout
            steps = [] if " htb 1: " in f" {shown}" else [["qdisc", "replace", "dev", link, "root", "handle", "1:", "htb", "default", "1"],
                                                        ["class", "replace", "dev", link, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit"],
                                                        ["class", "replace", "dev", link, "parent", "1:", "classid", "1:2", "htb", "rate", "8bit",
                                                         "ceil", "8bit", "burst", "1b", "cburst", "1b"],
                                                        ["qdisc", "replace", "dev", link, "parent", "1:2", "handle", "20:", "pfifo", "limit", "1"]]
            steps.append(["filter", "replace", "dev", link, "parent", "1:", "protocol", "ip", "prio", str(self._number(source)), "u32",
                          "match", "ip", "src", f"{self.hosts[source].address}/32", "flowid", "1:2"])
            for args in steps:
                subprocess.run(["tc", *args], check=True, capture_output=True, timeout=10)

    def rejoin(self, a: str, b: str) -> None:
        """Undo :meth:`partition` of ``a`` and ``b`` (the links' other cuts stay)."""
        for into, source in ((a, b), (b, a)):
            subprocess.run(["tc", "filter", "del", "dev", self.hosts[into].link, "parent", "1:", "prio", str(self._number(source))],
                           capture_output=True, timeout=10)

    def _number(self, name: str) -> int:
        """The host's number (1, 2, ...: the order it was added in)."""
        return list(self.hosts).index(name) + 1

    def popen(self, name: str, argv: list[str], **kwargs: object) -> subprocess.Popen:
        """Start ``argv`` inside host ``name``; :meth:`close` ends it if it is still running."""
        proc = subprocess.Popen(self.hosts[name].command(*argv), **kwargs)  # type: ignore[call-overload]
        self.hosts[name].processes.append(proc)
        return proc

    def run(self, name: str, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        return subprocess.run(self.hosts[name].command(*argv), **kwargs)  # type: ignore[call-overload]

    def pids(self, name: str) -> list[int]:
        """Every process living in host ``name``'s namespace."""
        out = _ip("netns", "pids", self.hosts[name].namespace, check=False).stdout
        return [int(p) for p in out.split()]

    def close(self) -> None:
        """Kill whatever still runs in the hosts, remove the namespaces, links and bridge."""
        for host in self.hosts.values():
            with contextlib.suppress(OSError):
                _ip("link", "set", host.link, "up", check=False)
            for pid in self.pids(host.name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for proc in host.processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            _ip("netns", "del", host.namespace, check=False)
            _ip("link", "del", host.link, check=False)
        _ip("link", "del", self.names.bridge, check=False)


@contextlib.contextmanager
def hosts(*names: str, seed: int | None = None) -> Iterator[Hosts]:
    """``names`` hosts on a bridge, removed afterwards."""
    made = Hosts(seed)
    try:
        for name in names:
            made.add(name)
        yield made
    finally:
        made.close()
