"""The threads that run jobs, and what each of them is running.

Executors take claimed jobs from a queue, run them (each thread with its own Django
connections) and report outcomes to the worker loop's event queue. A job that runs past its
timeout is failed by the loop and its thread replaced: Python cannot kill a thread, so the hung
one is abandoned and its late result dropped.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.utils import timezone

from django_pgqueue import registry
from django_pgqueue.exceptions import JobTimeout
from django_pgqueue.worker.execution import Outcome, execute, failed, log_outcome

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = logging.getLogger("django_pgqueue.worker")

#: How often running jobs with a timeout are checked.
TIMEOUT_CHECK_INTERVAL = 0.25


@dataclass(frozen=True)
class Dropped:
    """Event: a claimed job was not run because another worker owns it now."""

    job_id: int


@dataclass
class _Running:
    job: Job
    started_at: datetime
    deadline: float | None  # monotonic time after which the job counts as hung

    @property
    def attempt(self) -> tuple[int, int]:
        return (self.job.pk, self.job.attempts)


class Executors:
    def __init__(self, worker_id: str, count: int, events: queue.SimpleQueue[Any]) -> None:
        self.worker_id = worker_id
        self.count = count
        self.events = events
        #: Claimed jobs whose lock another worker took over: skipped if not started yet.
        self.lost: set[int] = set()
        self._work: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._running: dict[tuple[int, int], _Running] = {}  # (id, attempt) -> running
        self._abandoned: set[tuple[int, int]] = set()  # attempts failed on their timeout
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for _ in range(self.count):
            self._start_thread()

    def stop(self) -> None:
        """Let every thread finish its current job and exit (hung ones never will)."""
        for _ in self._threads:
            self._work.put(None)

    def submit(self, job: Job) -> None:
        self._work.put(job)

    def take_unstarted(self) -> list[int]:
        """Take back the jobs no thread has started yet; returns their ids."""
        ids: list[int] = []
        while True:
            try:
                job = self._work.get_nowait()
            except queue.Empty:
                return ids
            if job is not None:
                ids.append(job.pk)

    def abandoned(self, job: Job) -> bool:
        return (job.pk, job.attempts) in self._abandoned

    @property
    def has_deadlines(self) -> bool:
        return any(r.deadline is not None for r in list(self._running.values()))

    def fail_overdue(self) -> list[Outcome]:
        """Fail the attempts running past their timeout and replace the threads they hold."""
        now = time.monotonic()
        with self._lock:
            overdue = [
                r
                for r in self._running.values()
                if r.deadline is not None and now > r.deadline and r.attempt not in self._abandoned
            ]
            self._abandoned.update(r.attempt for r in overdue)
        outcomes = []
        for running in overdue:
            job = running.job
            exc = JobTimeout(
                f"Job {job.name!r} #{job.pk} ran longer than its "
                f"{registry.timeout_of(job.name):g}s timeout"
            )
            outcome = failed(
                job, exc, running.started_at, self.worker_id, registry.retry_delay_of(job)
            )
            log_outcome(job, outcome)
            outcomes.append(outcome)
            self._start_thread()
        return outcomes

    def _start_thread(self) -> None:
        thread = threading.Thread(
            target=self._run, name=f"pgqueue-executor-{len(self._threads)}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def _run(self) -> None:
        while True:
            job = self._work.get()
            if job is None:
                connections.close_all()
                return
            if job.pk in self.lost:
                self.events.put(Dropped(job.pk))
                continue
            timeout = registry.timeout_of(job.name)
            attempt = (job.pk, job.attempts)
            with self._lock:
                self._running[attempt] = _Running(
                    job, timezone.now(), time.monotonic() + timeout if timeout else None
                )
            outcome = execute(job, self.worker_id)
            with self._lock:
                self._running.pop(attempt, None)
                abandoned = attempt in self._abandoned
                self._abandoned.discard(attempt)
            if abandoned:
                # Its timeout outcome is recorded and a new thread took this one's place.
                logger.warning("Job #%d finished after its timeout; result dropped", job.pk)
                connections.close_all()
                return
            log_outcome(job, outcome)
            self.events.put(outcome)
