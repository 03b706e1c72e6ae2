"""The faults a chaos run injects, and the guards on the one that touches the server."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.db import connections

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench.chaos import queries
from django_pgqueue.contrib.bench.results import BenchError
from django_pgqueue.operations import DATABASE_ERRORS

FAULTS = ("sigkill", "terminate", "restart")
LOCAL_HOSTS = ("", "localhost", "127.0.0.1", "::1")


def worker_processes(supervisor_pid: int) -> list[int]:
    """The worker processes under ``run_jobs``'s supervisor (Linux: from /proc)."""
    path = Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children")
    try:
        return [int(pid) for pid in path.read_text().split()]
    except OSError:
        return []


def kill_a_worker_process(supervisor_pid: int) -> str:
    children = worker_processes(supervisor_pid)
    if not children:
        raise BenchError(
            f"No worker process under supervisor {supervisor_pid} to kill (needs Linux's /proc)"
        )
    victim = min(children)
    os.kill(victim, signal.SIGKILL)
    return f"SIGKILL of worker process {victim}"


def terminate_worker_connections() -> str:
    count = queries.fetchone(queries.TERMINATE_WORKERS)
    return f"pg_terminate_backend of {count} worker connections"


@dataclass
class ServerControl:
    """Restarts the queue's PostgreSQL server: only a local one, from the data directory given.

    :meth:`check` refuses unless the Django connection goes to this machine (a Unix socket or a
    loopback address) and the server reports ``pgdata`` as its data directory.
    """

    pgdata: Path
    pg_ctl: str = "pg_ctl"
    log: Path | None = None

    def check(self) -> None:
        host = str(connections[settings.DATABASE].settings_dict.get("HOST") or "")
        if not (host in LOCAL_HOSTS or host.startswith("/")):
            raise BenchError(f"Refusing to restart a server that is not local (host {host!r})")
        if not (shutil.which(self.pg_ctl) or Path(self.pg_ctl).is_file()):
            raise BenchError(f"pg_ctl not found: {self.pg_ctl!r} (give its path with --pg-ctl)")
        try:
            reported = queries.fetchone(queries.DATA_DIRECTORY)
        except DATABASE_ERRORS as exc:
            raise BenchError(
                "Cannot read the server's data_directory (needs a superuser or "
                f"pg_read_all_settings) to check --pgdata: {exc}"
            ) from None
        if os.path.realpath(str(reported)) != os.path.realpath(self.pgdata):
            raise BenchError(
                f"The server runs from {reported}, not from --pgdata {self.pgdata}: refusing "
                "to restart it"
            )

    def restart(self) -> str:
        argv = [self.pg_ctl, "-D", str(self.pgdata), "-m", "fast", "-w", "-t", "120"]
        if self.log is not None:
            argv += ["-l", str(self.log)]
        argv.append("restart")
        owner = pwd.getpwuid(os.stat(self.pgdata).st_uid).pw_name
        if os.geteuid() == 0 and owner != "root":  # PostgreSQL never runs as root
            argv = ["runuser", "-u", owner, "--", *argv]
        # The server inherits pg_ctl's output without -l: never a pipe we would wait on.
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise BenchError(f"pg_ctl restart failed (exit status {done.returncode})")
        return f"pg_ctl restart -m fast of {self.pgdata}"
