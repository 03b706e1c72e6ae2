"""How the figures are taken: percentiles, CPU time of database backends, the bare claim loop,
and what machine they were taken on."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import django
import psycopg
from django.db import connections

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.results import BenchError
from django_pgqueue.contrib.bench.workers import ForkedProcess
from django_pgqueue.states import JobStatus


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (``pct`` in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of an empty sample")
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu_model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    server = database.server_settings()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "load_average_1m": round(load[0], 2),
        "platform": platform.platform(),
        "postgresql": server["server_version"],
        "postgresql_synchronous_commit": server["synchronous_commit"],
        "postgresql_shared_buffers": server["shared_buffers"],
        "postgresql_autovacuum": server["autovacuum"],
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "psycopg_impl": psycopg.pq.__impl__,
    }


class BackendCPU:
    """CPU seconds used so far by the PostgreSQL backends serving some application names.

    Read from /proc, so only when the server runs on this machine (and the benchmark may read
    its processes); ``available`` is False otherwise. A backend's last reading is kept after it
    exits, so sample often: whatever it used after its last reading is missed.
    """

    def __init__(self, application_prefix: str) -> None:
        self.application_prefix = application_prefix
        self.seconds: dict[int, float] = {}
        self._next_lookup = 0.0
        host = str(connections[settings.DATABASE].settings_dict.get("HOST") or "")
        self.available = (
            host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")
        ) and os.path.exists("/proc/self/stat")
        self._tick = os.sysconf("SC_CLK_TCK") if self.available else 100

    def sample(self, lookup: bool = True) -> None:
        if not self.available:
            return
        now = time.monotonic()
        # Every sample until a backend is known (a short drain may end within 0.1 s of its
        # workers connecting), then every 0.1 s.
        if lookup and (not self.seconds or now >= self._next_lookup):
            self._next_lookup = now + 0.1
            for pid in database.backend_pids(self.application_prefix):
                self.seconds.setdefault(pid, 0.0)
        for pid in self.seconds:
            used = self.read(pid)
            if used is not None:
                self.seconds[pid] = used

    def read(self, pid: int) -> float | None:
        """CPU seconds used so far by the backend process ``pid`` (None: not readable)."""
        try:
            with open(f"/proc/{pid}/comm") as fh:
                if not fh.read().startswith("postgres"):
                    return None
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / self._tick

    @property
    def total(self) -> float | None:
        return sum(self.seconds.values()) if self.available and self.seconds else None


def watch_drain(children: Sequence[ForkedProcess], backends: BackendCPU) -> None:
    """Wait for every child to exit, sampling their backends' CPU meanwhile (every 10 ms: a
    backend's CPU after its last reading is missed); a failed child is a :class:`BenchError`."""
    while any(child.poll() is None for child in children):
        time.sleep(0.01)
        backends.sample(lookup=len(backends.seconds) < len(children))
    failed = [child.exit_code for child in children if child.exit_code != 0]
    if failed:
        raise BenchError(f"{len(failed)} of {len(children)} drain processes failed: {failed}")


@dataclass(frozen=True)
class ClaimRun:
    jobs: int
    seconds: float  # wall clock
    cpu_seconds: float | None  # this process plus its database backend; None if not local

    @property
    def per_s(self) -> float:
        return self.jobs / self.seconds

    @property
    def cpu_per_s(self) -> float | None:
        """Jobs per CPU-second: what the loop would do alone on an idle machine."""
        return None if not self.cpu_seconds else self.jobs / self.cpu_seconds


def claim_throughput(queue: str, worker_id: str, batch_size: int) -> ClaimRun:
    """The worker's two statements alone, in a loop: claim a batch, write the batch back as
    completed, until the queue is empty. No job code, no worker threads.

    Measures wall time, and the CPU time of this process and of its database backend: on a
    machine shared with other work, the CPU time per job is the figure that stays put.
    """
    from django_pgqueue import operations
    from django_pgqueue.worker.claims import CLAIM_PATH_MAX_AGE
    from django_pgqueue.worker.connection import QueueConnection

    done = 0
    request = operations.ClaimRequest(
        worker_id=worker_id,
        limit=batch_size,
        queues=[queue],
        visibility_timeout=settings.VISIBILITY_TIMEOUT,
    )
    path = operations.ClaimPath(max_age=CLAIM_PATH_MAX_AGE)
    # The worker's own connection and the exact operations its loop calls.
    connection = QueueConnection(settings.DATABASE, f"pgqueue bench {worker_id}")
    try:
        backend_pid = database.backend_pid(connection)
        backend = BackendCPU("")
        server_before = backend.read(backend_pid) if backend.available else None
        client_before = time.process_time()
        started = time.perf_counter()
        while True:
            jobs, _ = operations.claim(connection, request, path=path)
            if not jobs:
                break
            now = datetime.now(UTC)
            operations.finish(
                connection,
                worker_id,
                [
                    operations.Outcome(
                        job.pk,
                        JobStatus.COMPLETED,
                        now,
                        now,
                        result_json="null",
                        claim_token=job.claim_token,
                    )
                    for job in jobs
                ],
                delete_completed=False,
            )
            done += len(jobs)
        seconds = time.perf_counter() - started
        client = time.process_time() - client_before
        server_after = backend.read(backend_pid) if server_before is not None else None
    finally:
        connection.close()
    if done == 0:
        raise BenchError("Nothing to claim")
    cpu = None
    if server_before is not None and server_after is not None:
        cpu = client + server_after - server_before
    return ClaimRun(done, seconds, cpu)
