"""A private PostgreSQL cluster for the tests that stop, restart or crash the server.

The shared server the rest of the suite uses is never stopped or reconfigured: these tests get a
cluster of their own, made by ``scripts/pgdb.py`` (initdb in a temporary directory, run as an
unprivileged user when we are root) and listening on a free port of 127.0.0.1. One database,
migrated once per session, holds the queue; every test starts with empty tables.

The test process reaches it with plain psycopg connections (one per call, so a server restart
never leaves the test with a dead connection) and enqueues through ``operations``, the code
the application uses. Worker subprocesses reach it through libpq's ``PG*`` variables.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

from django_pgqueue import operations
from django_pgqueue.decorators import JobFunction
from scripts import pgdb
from tests.utils import ROOT, manage, wait_until, worker_env

DATABASE = "pgqueue_faults"
# Low enough for a test to open every connection the server allows ("too many clients"), high
# enough for the workers.
MAX_CONNECTIONS = 30
#: The application_name of the test process's own connections.
TEST_APPLICATION = "test process"


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """A throwaway PostgreSQL cluster that tests may stop, restart and crash."""

    def __init__(self, **settings: str) -> None:
        base = Path(tempfile.mkdtemp(prefix="pgqueue-cluster-"))
        self.cluster = pgdb.Cluster(
            base=base,
            user=pgdb.run_as_user(),
            port=free_port(),
            listen="127.0.0.1",
            settings={"max_connections": str(MAX_CONNECTIONS), "fsync": "off", **settings},
        )

    @property
    def port(self) -> int:
        return self.cluster.port

    @property
    def logfile(self) -> Path:
        return self.cluster.logfile

    def database(self, name: str = DATABASE) -> pgdb.Database:
        return self.cluster.database(name)

    def conninfo(self, name: str = DATABASE) -> str:
        return f"host=127.0.0.1 port={self.port} user={pgdb.PRIVATE_USER} dbname={name}"

    def connect(self, name: str = DATABASE, **kwargs: Any) -> psycopg.Connection[Any]:
        """A connection of the test process (named so, and never terminated by a test)."""
        return psycopg.connect(
            self.conninfo(name),
            autocommit=True,
            connect_timeout=5,
            application_name=TEST_APPLICATION,
            **kwargs,
        )

    # ----- the faults ------------------------------------------------------------------------

    def start(self) -> None:
        pgdb.start_private_cluster(self.cluster)
        wait_until(self.answers, timeout=60, interval=0.1)

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``: ``fast`` rolls back and disconnects, ``immediate`` crashes."""
        if not pgdb.stop_private_cluster(self.cluster, mode):
            raise AssertionError(f"pg_ctl stop -m {mode} failed:\n{self.cluster.log_tail()}")

    def crash(self) -> None:
        self.stop("immediate")

    def restart(self) -> None:
        result = self.cluster.pg_ctl("-m", "fast", "-w", "-l", str(self.logfile), "restart")
        if result.returncode != 0:
            raise AssertionError(
                f"pg_ctl restart failed:\n{result.stderr}{self.cluster.log_tail()}"
            )
        wait_until(self.answers, timeout=60, interval=0.1)

    def answers(self) -> bool:
        try:
            with self.connect("postgres"):
                return True
        except psycopg.OperationalError:
            return False

    def standby(self) -> PrivateCluster:
        """A streaming replica of this cluster (``pg_basebackup -R``) on a port of its own,
        started; :meth:`promote` makes it the primary."""
        replica = PrivateCluster.__new__(PrivateCluster)
        base = Path(tempfile.mkdtemp(prefix="pgqueue-standby-"))
        replica.cluster = pgdb.Cluster(
            base=base,
            user=self.cluster.user,
            port=free_port(),
            listen="127.0.0.1",
            settings=self.cluster.settings,
        )
        if replica.cluster.user is not None:
            entry = pwd.getpwnam(replica.cluster.user)
            os.chown(base, entry.pw_uid, entry.pw_gid)
        basebackup = pgdb.find_binary("pg_basebackup")
        assert basebackup, "pg_basebackup not found"
        argv = [basebackup, "-D", str(replica.cluster.data), "-R", "-X", "stream", "-c", "fast"]
        argv += ["-h", "127.0.0.1", "-p", str(self.port), "-U", pgdb.PRIVATE_USER]
        done = subprocess.run(
            pgdb.as_user(replica.cluster.user, argv),
            capture_output=True,
            text=True,
            check=False,
            cwd="/",
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        replica.cluster.socket_dir.mkdir(mode=0o700, exist_ok=True)
        with open(replica.cluster.data / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# The standby's own\n"
                f"port = {replica.port}\n"
                f"unix_socket_directories = '{replica.cluster.socket_dir}'\n"
            )
        replica.start()
        return replica

    def promote(self) -> None:
        result = self.cluster.pg_ctl("-w", "promote")
        assert result.returncode == 0, result.stdout + result.stderr

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            pgdb.stop_private_cluster(self.cluster, "immediate")
        shutil.rmtree(self.cluster.base, ignore_errors=True)

    # ----- the queue database ----------------------------------------------------------------

    def create_queue_database(self, name: str = DATABASE) -> None:
        """Create ``name`` and migrate it, as ``manage.py migrate`` would in production."""
        pgdb.ensure_database(self.database(name))
        result = subprocess.run(
            manage("migrate", "--noinput", "-v", "0"),
            env=self.env(name),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr

    def env(self, name: str = DATABASE, **extra: str) -> dict[str, str]:
        """The environment of a worker (or ``manage.py``) on this cluster's database."""
        env = worker_env()
        env.pop("PGPASSWORD", None)
        env.update(
            PGHOST="127.0.0.1",
            PGPORT=str(self.port),
            PGUSER=pgdb.PRIVATE_USER,
            PGDATABASE=name,
        )
        env.update(extra)
        return env


class ClusterQueue:
    """The queue in a private cluster's database, seen from the test process.

    An :class:`operations.Database`: ``operations.insert_many`` enqueues through it exactly as
    it does through Django's connection.
    """

    alias = "default"

    def __init__(
        self,
        cluster: PrivateCluster,
        name: str = DATABASE,
        pinned: psycopg.Connection[Any] | None = None,
    ) -> None:
        self.cluster = cluster
        self.name = name
        #: A connection to use for every call (when no other can be opened), else one per call.
        self.pinned = pinned
        self._conn: psycopg.Connection[Any] | None = pinned

    @contextlib.contextmanager
    def cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        if self._conn is not None:
            with self._conn.cursor() as cursor:
                yield cursor
            return
        with self.cluster.connect(self.name) as conn, conn.cursor() as cursor:
            yield cursor

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        if self.pinned is not None:
            with self.pinned.transaction():
                yield
            return
        with self.cluster.connect(self.name) as conn, conn.transaction():
            self._conn = conn
            try:
                yield
            finally:
                self._conn = None

    def after_commit(self, func: Callable[[], None]) -> None:
        func()  # every call of this class commits before it returns

    def enqueue_many(
        self, job: JobFunction[Any, Any], calls: Sequence[tuple[Any, ...]]
    ) -> list[int]:
        payloads = [job.serialize(call, {}) for call in calls]
        return operations.insert_many(self, job.spec, payloads)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.cursor() as cursor:
            cursor.execute(sql, params)  # type: ignore[arg-type]
            return cursor.fetchall() if cursor.description else []

    def statuses(self) -> Counter[str]:
        return Counter(dict(self.query("SELECT status, count(*) FROM pgqueue_job GROUP BY 1")))

    def reset(self) -> None:
        self.query("TRUNCATE pgqueue_job, pgqueue_worker")

    def terminate_workers(self) -> int:
        """``pg_terminate_backend`` every worker connection (loop, listener, supervisor, jobs)."""
        rows = self.query(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND application_name <> %s "
            "AND datname = current_database()",
            [TEST_APPLICATION],
        )
        return int(rows[0][0])


@contextlib.contextmanager
def running_cluster(**settings: str) -> Iterator[PrivateCluster]:
    """A new cluster with ``settings``, started, its queue database migrated; destroyed
    afterwards."""
    cluster = PrivateCluster(**settings)
    try:
        cluster.start()
        cluster.create_queue_database()
        yield cluster
    finally:
        cluster.destroy()


def empty_queue(cluster: PrivateCluster) -> ClusterQueue:
    """The cluster's queue, running and empty."""
    if not cluster.answers():  # a test that failed mid-outage left it stopped
        cluster.start()
    queue = ClusterQueue(cluster)
    queue.reset()
    return queue


def wait_for_statuses(
    queue: ClusterQueue, expected: Counter[str], timeout: float = 120, interval: float = 0.1
) -> None:
    """Poll (through outages: a refused connection is "not yet") until the counts match."""

    def reached() -> bool:
        try:
            return queue.statuses() == expected
        except psycopg.OperationalError:
            return False

    try:
        wait_until(reached, timeout=timeout, interval=interval)
    except AssertionError:
        raise AssertionError(f"statuses {queue.statuses()} never became {expected}") from None


def sleep_through(seconds: float) -> None:
    """Let a fault last a while (the worker must live through it, not merely miss it)."""
    time.sleep(seconds)
