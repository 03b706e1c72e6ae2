"""Workers on separate hosts: Linux network namespaces linked to a private PostgreSQL cluster.

:func:`hosts` makes ``count`` network namespaces, each a host of its own: a veth pair links it
to the root namespace, the root side with address ``10.231.X.(4i+1)/30`` and the namespace
side ``10.231.X.(4i+2)/30`` (a route to the root side is the /30 itself). ``X`` is picked at
random among the ``10.231.X.0/24`` no interface or route of this machine uses, under a file
lock, so parallel sessions never share one; the namespaces and veths are named with a random
tag for the same reason. A private cluster (:class:`tests.private_cluster.PrivateCluster`)
listens on 127.0.0.1 and on every root-side address, ``trust`` for that /24 only.

:meth:`Hosts.start_worker` runs ``run_jobs`` inside a namespace (``ip netns exec``), its
``PGHOST`` the root side of that host's link: the worker reaches the database over the veth
like a worker on another machine over the network. :meth:`Hosts.cut` drops every packet
between a host and the root namespace (an nftables table in the host's namespace, input and
output): a connection neither fails nor is refused, it hangs, like a cable pulled or a
partitioned network; :meth:`Hosts.restore` deletes the table and the same connections go on.

Nothing but the test's own namespaces, 127.0.0.1 and the picked /24 is ever a target. Every
namespace, veth and process it made, and the cluster, are gone after the ``with`` block, even
when the test fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import random
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from scripts import pgdb, provision
from tests.private_cluster import PrivateCluster
from tests.utils import ROOT, manage

#: The /16 the links' /24 is picked in (private, and nothing of this machine's uses it).
SUPERNET = "10.231"
#: Held while a /24 is picked and its addresses are set, by every session on this machine.
LOCK = Path(tempfile.gettempdir()) / "pgqueue-hosts.lock"


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {done.stdout}{done.stderr}")
    return done


@dataclass
class Host:
    index: int
    netns: str  # the namespace's name
    veth: str  # the root side of the link (the namespace side is veth + "n")
    address: str  # the root side's address: what the host's workers connect to
    own_address: str  # the namespace side's address
    cut_now: bool = False
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def exec(self, *argv: str) -> list[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


def used_subnets() -> set[int]:
    """The X of every 10.231.X.0/24 an address or route of this machine touches."""
    text = run("ip", "-4", "addr").stdout + run("ip", "-4", "route").stdout
    used = set()
    for word in text.split():
        if word.startswith(f"{SUPERNET}."):
            used.add(int(word.split(".")[2].split("/")[0]))
    return used


class Hosts:
    """``count`` hosts and the cluster they reach; use :func:`hosts`."""

    def __init__(self, count: int, **settings: str) -> None:
        self.tag = secrets.token_hex(3)
        self.count = count
        self.settings = settings
        self.hosts: list[Host] = []
        self.cluster: PrivateCluster | None = None
        self.subnet = ""
        self.logdir = Path(tempfile.mkdtemp(prefix="pgqueue-hosts-"))

    # ----- setting up and tearing down ---------------------------------------------------------

    def setup(self) -> None:
        for tool in (provision.IPROUTE, provision.NFTABLES):
            assert provision.find(tool), f"{tool.name} missing: {tool.install_hint()}"
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            free = sorted(set(range(256)) - used_subnets())
            assert free, f"every {SUPERNET}.X.0/24 is in use"
            third = random.choice(free)
            self.subnet = f"{SUPERNET}.{third}.0/24"
            for index in range(self.count):
                self._link(index, third)
        pg_hosts = ",".join(["127.0.0.1", *(host.address for host in self.hosts)])
        self.cluster = PrivateCluster(
            listen_addresses=f"'{pg_hosts}'", max_connections="200", **self.settings
        )
        pgdb.init_cluster(self.cluster.cluster)
        with open(self.cluster.cluster.data / "pg_hba.conf", "a") as hba:
            hba.write(f"\n# The test's hosts (tests/hosts.py)\nhost all all {self.subnet} trust\n")
        self.cluster.start()
        self.cluster.create_queue_database()

    def _link(self, index: int, third: int) -> None:
        netns = f"pgqueue-{self.tag}-{index}"
        veth = f"pq{self.tag}h{index}"  # at most 15 characters, as Linux wants
        base = ipaddress.ip_address(f"{SUPERNET}.{third}.{4 * index}")
        host = Host(index, netns, veth, str(base + 1), str(base + 2))
        run("ip", "netns", "add", netns)
        self.hosts.append(host)
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "n", "netns", netns)
        run("ip", "addr", "add", f"{host.address}/30", "dev", veth)
        run("ip", "link", "set", veth, "up")
        run(*host.exec("ip", "addr", "add", f"{host.own_address}/30", "dev", veth + "n"))
        run(*host.exec("ip", "link", "set", veth + "n", "up"))
        run(*host.exec("ip", "link", "set", "lo", "up"))

    def close(self) -> None:
        for host in self.hosts:
            for proc in host.procs:
                kill(proc)
        for host in self.hosts:
            run("ip", "netns", "del", host.netns, check=False)
            run("ip", "link", "del", host.veth, check=False)  # gone with its peer, normally
        if self.cluster is not None:
            self.cluster.destroy()
        if os.environ.get("PGQUEUE_TEST_KEEP_HOST_LOGS") != "1":  # kept to read them
            shutil.rmtree(self.logdir, ignore_errors=True)

    # ----- workers -----------------------------------------------------------------------------

    def env(self, host: Host, **extra: str) -> dict[str, str]:
        """A worker's environment on ``host``: the cluster, reached over the host's link."""
        assert self.cluster is not None
        return self.cluster.env(PGHOST=host.address, **extra)

    def start_worker(
        self, host: Host, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """``run_jobs ARGS`` inside ``host``'s namespace, in a process group of its own, its
        output in a file (:meth:`output`)."""
        log = self.logdir / f"host{host.index}-{len(host.procs)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                host.exec(*manage("run_jobs", *args)),
                env=env or self.env(host),
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.log_path = log  # type: ignore[attr-defined]
        host.procs.append(proc)
        return proc

    def output(self, host: Host) -> str:
        return "".join(
            f"--- {proc.log_path} ---\n"  # type: ignore[attr-defined]
            + Path(proc.log_path).read_text(errors="replace")[-3000:]  # type: ignore[attr-defined]
            for proc in host.procs
        )

    def stop_workers(self, timeout: float = 30) -> None:
        """SIGTERM every worker (a graceful stop), SIGKILL what is left after ``timeout``."""
        for host in self.hosts:
            for proc in host.procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGTERM)
        for host in self.hosts:
            for proc in host.procs:
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    kill(proc)

    # ----- the link ----------------------------------------------------------------------------

    def cut(self, host: Host) -> None:
        """Drop every packet between ``host`` and the root namespace, both ways: nothing is
        refused or reset, a connection just hears nothing (unlike ``ip link set down``)."""
        table = self._table(host)
        run(*host.exec("nft", "add", "table", "inet", table))
        for chain, hook, match in [("out", "output", "daddr"), ("in", "input", "saddr")]:
            run(
                *host.exec(
                    "nft",
                    "add",
                    "chain",
                    "inet",
                    table,
                    chain,
                    f"{{ type filter hook {hook} priority 0; policy accept; }}",
                )
            )
            run(
                *host.exec(
                    "nft", "add", "rule", "inet", table, chain, "ip", match, host.address, "drop"
                )
            )
        host.cut_now = True

    def restore(self, host: Host) -> None:
        run(*host.exec("nft", "delete", "table", "inet", self._table(host)))
        host.cut_now = False

    def _table(self, host: Host) -> str:
        return f"pgqueue_cut_{self.tag}"

    def reaches(self, host: Host, timeout: float = 1) -> bool:
        """Whether a TCP connection from ``host`` to the cluster opens now."""
        assert self.cluster is not None
        probe = (
            "import socket,sys; s=socket.socket(); s.settimeout(float(sys.argv[3]));"
            "s.connect((sys.argv[1], int(sys.argv[2])))"
        )
        done = subprocess.run(
            host.exec("python3", "-c", probe, host.address, str(self.cluster.port), str(timeout)),
            capture_output=True,
            check=False,
            timeout=timeout + 10,
        )
        return done.returncode == 0


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


@contextlib.contextmanager
def hosts(count: int, **settings: str) -> Iterator[Hosts]:
    """``count`` hosts, each its own network namespace, and a private cluster they reach over
    their links (``settings``: more postgresql.conf lines); all of it gone afterwards."""
    made = Hosts(count, **settings)
    try:
        made.setup()
        yield made
    finally:
        made.close()
