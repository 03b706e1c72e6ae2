"""A real PgBouncer (Debian's ``pgbouncer`` package) in transaction mode, for the tests.

It listens on a free port of 127.0.0.1 and forwards every database name to the server the test
suite uses (so the test database too). Clients are trusted; the server is reached with the
test settings' user (and password, from the auth file). PgBouncer refuses to run as root, so
as root it runs as the same unprivileged user as the private clusters (``scripts/pgdb.py``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from scripts import pgdb
from tests.private_cluster import free_port
from tests.utils import wait_until


def _quote(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


class PgBouncer:
    def __init__(
        self,
        server: dict[str, Any],
        binary: str,
        pool_size: int = 4,
        listen: str = "127.0.0.1",
        max_client_conn: int = 200,
    ) -> None:
        self.binary = binary
        #: Its addresses, comma-separated (tests/hosts.py: the root side of each host's link).
        self.listen = listen
        self.server = server
        self.port = free_port()
        self.user = pgdb.run_as_user()
        self.dir = Path(tempfile.mkdtemp(prefix="pgqueue-pgbouncer-"))
        self.logfile = self.dir / "pgbouncer.log"
        db_user = str(server.get("USER") or os.environ.get("USER", "postgres"))
        self.db_user = db_user
        host = str(server.get("HOST") or "127.0.0.1")
        port = str(server.get("PORT") or 5432)
        (self.dir / "users.txt").write_text(
            f"{_quote(db_user)} {_quote(str(server.get('PASSWORD') or ''))}\n"
        )
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n"
            f"listen_addr = {listen}\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            f"max_client_conn = {max_client_conn}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.logfile}\n"
            f"pidfile = {self.dir / 'pgbouncer.pid'}\n"
        )
        if self.user is not None:
            import pwd

            entry = pwd.getpwnam(self.user)
            for path in [self.dir, *self.dir.iterdir()]:
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out = open(self.dir / "stdout.log", "wb")  # noqa: SIM115  (kept open for the process)
        self.proc = subprocess.Popen(
            pgdb.as_user(self.user, [self.binary, str(self.dir / "pgbouncer.ini")]),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd="/",
        )
        out.close()
        try:
            wait_until(self.answers, timeout=30, interval=0.1)
        except AssertionError:
            raise AssertionError(f"PgBouncer did not start:\n{self.log()}") from None

    def answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"PgBouncer exited:\n{self.log()}")
        try:
            with self.connect("postgres"):
                return True
        except psycopg.OperationalError:
            return False

    def connect(self, dbname: str, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.listen.split(",")[0],
            port=self.port,
            user=self.db_user,
            dbname=dbname,
            autocommit=True,
            connect_timeout=5,
            **kwargs,
        )

    def log(self) -> str:
        parts = [p.read_text(errors="replace") for p in (self.dir / "stdout.log", self.logfile)]
        return "".join(p for p in parts)[-4000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
