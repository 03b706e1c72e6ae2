"""One chaos run: the load, the faults one after the other, and the accounting at the end."""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import connections
from django.utils import timezone

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.chaos import queries
from django_pgqueue.contrib.bench.chaos.faults import (
    FAULTS,
    ServerControl,
    kill_a_worker_process,
    terminate_worker_connections,
)
from django_pgqueue.contrib.bench.results import BenchError, new_queue_name
from django_pgqueue.contrib.bench.workers import WorkerProcess
from django_pgqueue.decorators import JobFunction, job
from django_pgqueue.operations import DATABASE_ERRORS
from django_pgqueue.states import JobStatus

CHAOS_JOB = "django_pgqueue.bench.chaos"
#: How often the producer enqueues (its rate is spread over these ticks).
TICK = 0.05


def chaos_job(seq: int, path: str, sleep_ms: float) -> None:
    """Sleeps ``sleep_ms``, then appends its number to ``path``: one line per run."""
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{seq}\n".encode())
    finally:
        os.close(fd)


@functools.cache
def register() -> JobFunction[[int, str, float], None]:
    """Register the chaos job in this process (and so in the workers it forks)."""
    return job(name=CHAOS_JOB, max_attempts=25)(chaos_job)


@dataclass
class ChaosOptions:
    rate: float = 50.0  # jobs per second
    job_ms: float = 20.0
    processes: int = 2
    threads: int = 4
    faults: tuple[str, ...] = FAULTS
    fault_interval: float = 10.0  # seconds between faults (and before the first)
    rounds: int = 1
    recovery_timeout: float = 60.0
    drain_timeout: float = 120.0


@dataclass
class FaultResult:
    fault: str
    at: float  # seconds after the start
    detail: str
    recovery: float | None  # None: no job enqueued after it completed within the timeout


@dataclass
class ChaosResult:
    options: ChaosOptions
    queue: str
    faults: list[FaultResult] = field(default_factory=list)
    enqueued: int = 0
    enqueue_errors: int = 0
    rows: int = 0
    completed: int = 0
    runs: int = 0
    lost: int = 0
    lost_ids: list[int] = field(default_factory=list)
    duplicates: int = 0
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _retrying(action: Any, deadline: float) -> Any:
    """``action()`` until it stops raising database errors (the server may be away)."""
    while True:
        try:
            return action()
        except DATABASE_ERRORS:
            connections[settings.DATABASE].close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Producer(threading.Thread):
    """Enqueues ``rate`` numbered jobs per second; remembers the numbers whose enqueue
    returned (an enqueue that raised may still have committed: such jobs are counted as rows
    and run, but are not required)."""

    def __init__(
        self, task: JobFunction[[int, str, float], None], path: str, options: ChaosOptions
    ):
        super().__init__(name="pgqueue-chaos-producer", daemon=True)
        self.task = task
        self.path = path
        self.options = options
        self.confirmed: set[int] = set()
        self.errors = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        seq = 0
        due = 0.0
        try:
            while not self.stopping.wait(TICK):
                due += self.options.rate * TICK
                count, due = int(due), due - int(due)
                if not count:
                    continue
                numbers = range(seq, seq + count)
                seq += count
                calls = [(n, self.path, self.options.job_ms) for n in numbers]
                try:
                    self.task.enqueue_many(calls)
                except DATABASE_ERRORS:
                    self.errors += 1
                    connections[settings.DATABASE].close()
                    continue
                self.confirmed.update(numbers)
        finally:
            connections.close_all()

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=30)


class ChaosRun:
    def __init__(self, options: ChaosOptions, server: ServerControl | None = None) -> None:
        unknown = set(options.faults) - set(FAULTS)
        if unknown or not options.faults:
            raise BenchError(f"faults must be some of {', '.join(FAULTS)}")
        if "restart" in options.faults and server is None:
            raise BenchError("the restart fault needs --allow-restart and --pgdata")
        self.options = options
        self.server = server
        self.queue = new_queue_name()
        self.result = ChaosResult(options=options, queue=self.queue)

    def run(self) -> ChaosResult:
        options = self.options
        if self.server is not None:
            self.server.check()
        task = register()
        fd, path = tempfile.mkstemp(prefix="pgqueue-chaos-", suffix=".runs")
        os.close(fd)
        worker = WorkerProcess(
            queues=[self.queue],
            processes=options.processes,
            threads=options.threads,
            worker_id=f"{self.queue}:chaos",
        )
        producer = Producer(task.using(queue=self.queue), path, options)
        started = time.monotonic()
        try:
            worker.start()
            producer.start()
            for _ in range(options.rounds):
                for fault in options.faults:
                    time.sleep(options.fault_interval)
                    self._fault(fault, worker, started)
            time.sleep(options.fault_interval)  # the load after the last fault
            producer.stop()
            self._drain()
            self.result.seconds = time.monotonic() - started
            self._account(producer, Path(path))
        finally:
            producer.stop()
            worker.stop()
            with contextlib.suppress(*DATABASE_ERRORS):
                database.drop_broken_connection()
                database.delete_queue(self.queue, 0)
                database.delete_worker_rows(self.queue)
            Path(path).unlink(missing_ok=True)
        return self.result

    def _fault(self, fault: str, worker: WorkerProcess, started: float) -> None:
        at = time.monotonic() - started
        since = timezone.now()
        deadline = time.monotonic() + self.options.recovery_timeout
        if fault == "sigkill":
            assert worker.pid is not None
            detail = kill_a_worker_process(worker.pid)
        elif fault == "terminate":
            detail = _retrying(terminate_worker_connections, deadline)
        else:
            assert self.server is not None
            connections[settings.DATABASE].close()
            detail = self.server.restart()
        recovery = self._recovery(since, deadline)
        self.result.faults.append(FaultResult(fault, at, detail, recovery))

    def _recovery(self, since: datetime, deadline: float) -> float | None:
        """Seconds from ``since`` until a job enqueued after it completed (None: never)."""
        while time.monotonic() < deadline:
            try:
                first = queries.fetchone(queries.FIRST_COMPLETED_SINCE, [self.queue, since])
            except DATABASE_ERRORS:
                connections[settings.DATABASE].close()
                first = None
            if first is not None:
                return float((first - since).total_seconds())
            time.sleep(0.05)
        return None

    def _drain(self) -> None:
        deadline = time.monotonic() + self.options.drain_timeout
        while time.monotonic() < deadline:
            active = _retrying(lambda: queries.fetchone(queries.ACTIVE, [self.queue]), deadline)
            if not active:
                return
            time.sleep(0.2)

    def _account(self, producer: Producer, path: Path) -> None:
        deadline = time.monotonic() + 60
        rows = dict(_retrying(lambda: queries.fetchall(queries.JOBS, [self.queue]), deadline))
        runs = Counter(int(line) for line in path.read_text().split())
        lost = {n for n in producer.confirmed if n not in rows}
        lost |= {n for n, status in rows.items() if status != JobStatus.COMPLETED}
        lost |= {n for n, status in rows.items() if status == JobStatus.COMPLETED and not runs[n]}
        r = self.result
        r.enqueued = len(producer.confirmed)
        r.enqueue_errors = producer.errors
        r.rows = len(rows)
        r.completed = sum(1 for status in rows.values() if status == JobStatus.COMPLETED)
        r.runs = sum(runs.values())
        r.lost = len(lost)
        r.lost_ids = sorted(lost)[:20]
        r.duplicates = sum(1 for count in runs.values() if count > 1)
