"""The worker: one process's claim / run / record loop.

Threads of one worker process:

* the **loop** (the caller's thread), the scheduler: decides when to claim and how many, when
  to flush outcomes, heartbeat and prune, and handles shutdown. Every queue statement is an
  :mod:`django_pgqueue.operations` call on the worker's own connection, made from here.
* ``threads`` **executors**: run one job at a time each, with their own Django connections.
* the **listener** (unless ``PGQUEUE_LISTEN = False``): wakes the loop on NOTIFY.

Everything reaches the loop through one queue of events, so it sleeps in one place and wakes
for whichever comes first: an outcome, a notification, a signal, or its own timers.
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import signal
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.operations import CONNECTION_ERRORS, DATABASE_ERRORS, Outcome
from django_pgqueue.states import Attempt, JobStatus
from django_pgqueue.worker.connection import Backoff, QueueConnection
from django_pgqueue.worker.executors import TIMEOUT_CHECK_INTERVAL, Dropped, Executors
from django_pgqueue.worker.journal import Journal
from django_pgqueue.worker.listener import Listener

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = logging.getLogger("django_pgqueue.worker")

# How long the loop waits before looking again when runnable jobs exist that it could not
# claim (held by another claim, or waiting for their concurrency key).
BLOCKED_RECHECK = 0.2
# How far ahead jobs are claimed: enough to keep the executors busy for about this long.
PREFETCH_WINDOW = 0.2
# How often a claim also takes back the jobs of workers that stopped heartbeating.
RECLAIM_INTERVAL = 1.0
# Signals this close to the first are one request arriving twice (systemd and terminals signal
# the whole process group, and the supervisor forwards the same signal).
SIGNAL_DEDUPE_WINDOW = 1.0

_WAKE = object()
_STOP = object()


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerStats:
    claimed: int = 0
    finished: int = 0
    completed: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    lost: int = 0


class Worker:
    """Claims and runs jobs until stopped (or, with ``burst``, until none is runnable).

    Usable without ``call_command``::

        Worker(queues=["emails", "default"], threads=4).run()
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        *,
        threads: int = 1,
        batch_size: int | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        shutdown_timeout: float | None = None,
        worker_id: str | None = None,
        listen: bool | None = None,
        journal: Journal | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.queues = list(queues) if queues else None
        self.threads = threads
        self.batch_size = batch_size if batch_size is not None else settings.BATCH_SIZE
        self.burst = burst
        self.max_jobs = max_jobs
        self.shutdown_timeout = (
            shutdown_timeout if shutdown_timeout is not None else settings.SHUTDOWN_TIMEOUT
        )
        self.worker_id = worker_id or default_worker_id()
        self.listen = settings.LISTEN if listen is None else listen
        self.alias = settings.DATABASE
        self.stats = WorkerStats()

        self._events: queue_module.SimpleQueue[Any] = queue_module.SimpleQueue()
        self._connection = QueueConnection(self.alias, f"pgqueue worker {self.worker_id}")
        self._claimed: dict[int, Job] = {}  # claimed and not yet written back
        self._outcomes: list[Outcome] = []
        self._stopping = False
        self._first_signal_at: float | None = None
        self._journal = journal
        self._executors = Executors(self.worker_id, threads, self._events, journal)
        self._listener: Listener | None = None
        self._avg_duration = 0.01
        self._next_reclaim = 0.0  # when the next claim also takes back stale jobs

    # ----- public API ------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to shut down gracefully (thread-safe)."""
        self._events.put(_STOP)

    def run(self) -> int:
        """Run until stopped; returns the process exit status (0 for a clean stop)."""
        install = threading.current_thread() is threading.main_thread()
        previous = self._install_signal_handlers() if install else {}
        try:
            self._start_threads()
            logger.info(
                "Worker %s started: queues=%s threads=%d batch_size=%d%s",
                self.worker_id,
                ",".join(self.queues) if self.queues else "(all)",
                self.threads,
                self.batch_size,
                " burst" if self.burst else "",
            )
            self._loop()
            self._shutdown()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self._listener is not None:
                self._listener.stop()
            self._executors.stop()
            self._connection.close()
        logger.info(
            "Worker %s stopped: %d completed, %d retried, %d dead, %d handed back",
            self.worker_id,
            self.stats.completed,
            self.stats.retried,
            self.stats.dead,
            self.stats.released,
        )
        return 0

    # ----- threads and signals ---------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._first_signal_at is None:
            self._first_signal_at = now
            logger.info(
                "Worker %s received %s: finishing running jobs",
                self.worker_id,
                signal.Signals(signum).name,
            )
            self._events.put(_STOP)
        elif now - self._first_signal_at > SIGNAL_DEDUPE_WINDOW:
            logger.warning(
                "Worker %s: second signal, exiting now; running jobs are recovered by the "
                "supervisor (or after the visibility timeout)",
                self.worker_id,
            )
            os._exit(1)
        # Else the same shutdown request delivered twice (to the process group and forwarded
        # by the supervisor): nothing more to do.

    def _start_threads(self) -> None:
        self._executors.start()
        if self.listen and not self.burst:
            self._listener = Listener(self.alias, self.worker_id, self.queues, self._wake)
            self._listener.start()

    def _wake(self) -> None:
        self._events.put(_WAKE)

    # ----- the loop --------------------------------------------------------------------------

    def _loop(self) -> None:
        now = time.monotonic()
        heartbeat_interval = settings.HEARTBEAT_INTERVAL
        next_heartbeat = now  # registers the worker row at once
        next_prune = now
        flush_deadline: float | None = None
        next_claim: float = now  # when idle, when to look for jobs again
        backoff = Backoff()
        budget = self.max_jobs

        while True:
            # 1. Collect events: wait only when there is nothing to do right now.
            timeout = self._wait_time(next_claim, flush_deadline, next_heartbeat)
            self._drain_events(timeout)
            if self._stopping:
                return
            now = time.monotonic()
            if self._woken:
                self._woken = False
                next_claim = now
            if self._executors.has_deadlines:
                self._outcomes += self._executors.fail_overdue()
            self._outcomes += self._executors.replace_dead()
            if self._outcomes and flush_deadline is None:
                flush_deadline = now + settings.FLUSH_INTERVAL

            try:
                # 2. Write outcomes back in one statement when enough are buffered or due.
                if self._outcomes and (
                    len(self._outcomes) >= settings.FLUSH_SIZE
                    or now >= (flush_deadline or now)
                    or len(self._outcomes) >= len(self._claimed)  # nothing else in flight
                ):
                    retry_at = self._flush()
                    flush_deadline = None
                    if retry_at is not None and not self.burst:  # burst: retries aren't waited for
                        next_claim = min(next_claim, retry_at)
                    else:
                        # A finished job may unblock a concurrency key: look once more.
                        next_claim = min(next_claim, now)

                if now >= next_heartbeat:
                    self._heartbeat()
                    next_heartbeat = now + heartbeat_interval
                if now >= next_prune:
                    next_prune = now + self._prune()

                # 3. Claim when executors are about to run dry.
                if budget is not None and budget <= 0:
                    if not self._claimed and not self._outcomes:
                        return
                    next_claim = float("inf")
                    continue
                want = self._claim_size()
                if budget is not None:
                    want = min(want, budget)
                if want > 0 and now >= next_claim:
                    got = self._claim(want)
                    if budget is not None:
                        budget -= got
                    if got < want:
                        if self.burst and not self._claimed and not self._outcomes:
                            return
                        next_claim = self._idle_until()
                    else:
                        next_claim = now
                backoff.succeeded()
            except DATABASE_ERRORS as exc:
                # Connection lost, server restarting, failover, disk full...: never fatal.
                if self._connection.stop_preparing(exc):
                    continue
                delay = backoff.failed()
                if isinstance(exc, CONNECTION_ERRORS):
                    logger.warning(
                        "Worker %s: queue database unreachable (%s); retrying in %.1fs",
                        self.worker_id,
                        str(exc).strip(),
                        delay,
                    )
                else:
                    logger.exception(
                        "Worker %s: queue database error; retrying in %.1fs", self.worker_id, delay
                    )
                self._connection.close()
                self._drain_events(delay)
                if self._stopping:
                    return
            except Exception:
                # A bug of ours must not take the worker down with the jobs it holds.
                delay = backoff.failed()
                logger.exception(
                    "Worker %s: loop error; carrying on in %.1fs", self.worker_id, delay
                )
                self._drain_events(delay)
                if self._stopping:
                    return

    def _wait_time(
        self, next_claim: float, flush_deadline: float | None, next_heartbeat: float
    ) -> float:
        now = time.monotonic()
        deadlines = [next_heartbeat]
        if self._executors.has_deadlines:
            deadlines.append(now + TIMEOUT_CHECK_INTERVAL)
        if flush_deadline is not None:
            deadlines.append(flush_deadline)
        if self._claim_size() > 0:
            deadlines.append(next_claim)
        return max(0.0, min(deadlines) - now)

    def _drain_events(self, timeout: float) -> None:
        """Take every queued event; block up to ``timeout`` seconds for the first one."""
        try:
            event = self._events.get(timeout=timeout) if timeout > 0 else self._events.get_nowait()
        except queue_module.Empty:
            return
        while True:
            if event is _STOP:
                self._stopping = True
            elif event is _WAKE:
                self._woken = True
            elif isinstance(event, Outcome):
                self._record_duration(event)
                self._outcomes.append(event)
            elif isinstance(event, Dropped):
                self._claimed.pop(event.job_id, None)
                self._executors.lost.discard(event.job_id)
            try:
                event = self._events.get_nowait()
            except queue_module.Empty:
                return

    _woken = False

    def _record_duration(self, outcome: Outcome) -> None:
        if outcome.finished_at is not None:
            seconds = (outcome.finished_at - outcome.started_at).total_seconds()
            self._avg_duration = 0.9 * self._avg_duration + 0.1 * seconds

    def _claim_size(self) -> int:
        """How many jobs to claim now (0: not yet).

        Capacity is the executors plus enough prefetch to keep them busy for ~PREFETCH_WINDOW
        at the recent job duration, capped by ``batch_size``: no-op jobs are claimed 100 at a
        time, slow jobs one per free thread, so a worker never sits on jobs others could run.
        It claims once half the capacity is free (or a thread has nothing queued), so each
        statement claims a real batch.
        """
        prefetch = int(self.threads * PREFETCH_WINDOW / max(self._avg_duration, 1e-6))
        capacity = self.threads + min(self.batch_size, prefetch)
        in_flight = len(self._claimed)
        free = capacity - in_flight
        if free <= 0:
            return 0
        if in_flight - len(self._outcomes) < self.threads or free * 2 >= capacity:
            return free
        return 0

    def _idle_until(self) -> float:
        """Nothing runnable was left: sleep until a NOTIFY, the next run_after or the poll."""
        now = time.monotonic()
        poll = now + settings.POLL_INTERVAL
        next_run = operations.next_run_after(self._connection, self.queues)
        if next_run is None:
            logger.debug(
                "Worker %s: nothing pending; sleeping up to %.2fs", self.worker_id, poll - now
            )
            return poll
        seconds = (next_run - timezone.now()).total_seconds()
        if seconds <= 0:
            # Runnable, but held by another claim or waiting for its concurrency key.
            return min(poll, now + BLOCKED_RECHECK)
        logger.debug(
            "Worker %s: next job due in %.2fs; sleeping up to %.2fs",
            self.worker_id,
            seconds,
            min(poll, now + seconds) - now,
        )
        return min(poll, now + seconds)

    def _claim(self, limit: int) -> int:
        """Claim up to ``limit`` jobs and queue them for the executors; returns the rows taken
        (jobs found dead in the claim count: the claim was not short of work)."""
        reclaim = time.monotonic() >= self._next_reclaim
        jobs, taken = self._claim_once(limit, reclaim=reclaim)
        if taken < limit and not reclaim and self.burst:
            # A burst ends when a claim comes up short: look for stale jobs too before that.
            more, more_taken = self._claim_once(limit - taken, reclaim=True)
            jobs += more
            taken += more_taken
        logger.debug("Worker %s claimed %d of %d jobs asked", self.worker_id, taken, limit)
        for job in jobs:
            self._claimed[job.pk] = job
            self._executors.submit(job)
        self.stats.claimed += len(jobs)
        return taken

    def _claim_once(self, limit: int, *, reclaim: bool) -> tuple[list[Job], int]:
        if reclaim:
            self._next_reclaim = time.monotonic() + RECLAIM_INTERVAL
        return operations.claim_counted(
            self._connection,
            self.worker_id,
            self.queues,
            limit,
            settings.VISIBILITY_TIMEOUT,
            reclaim=reclaim,
        )

    def _flush(self) -> float | None:
        """Write buffered outcomes; returns when (monotonic) the earliest retry is due, if any."""
        outcomes, self._outcomes = self._outcomes, []
        try:
            written = operations.finish(
                self._connection,
                self.worker_id,
                outcomes,
                delete_completed=settings.RETENTION <= 0,
            )
        except BaseException:
            self._outcomes = outcomes + self._outcomes  # written later, never lost
            raise
        if self._journal is not None:
            self._journal.written(o.job_id for o in outcomes)
        logger.debug("Worker %s wrote %d outcomes", self.worker_id, len(written))
        retry_at: datetime | None = None
        for outcome in outcomes:
            self._claimed.pop(outcome.job_id, None)
            self.stats.finished += 1
            if outcome.job_id not in written:
                self.stats.lost += 1
                logger.warning(
                    "Worker %s: job #%d's outcome %s dropped; its lock expired and another "
                    "worker owns it",
                    self.worker_id,
                    outcome.job_id,
                    outcome.outcome,
                )
                continue
            if outcome.status == JobStatus.COMPLETED:
                self.stats.completed += 1
            elif outcome.outcome == Attempt.RETRIED:
                self.stats.retried += 1
                if outcome.run_after is not None and (
                    retry_at is None or outcome.run_after < retry_at
                ):
                    retry_at = outcome.run_after
            else:
                self.stats.dead += 1
        if retry_at is None:
            return None
        return time.monotonic() + max(0.0, (retry_at - timezone.now()).total_seconds())

    def _heartbeat(self) -> None:
        """Refresh our locks, notice jobs we no longer own, and report ourselves."""
        owned_ids = self._heartbeat_ids()
        if owned_ids:
            still = operations.heartbeat(self._connection, self.worker_id, owned_ids)
            for job_id in set(owned_ids) - still:
                logger.warning(
                    "Worker %s: job #%d is no longer ours: its lock expired", self.worker_id, job_id
                )
                self._executors.lost.add(job_id)
        operations.report_worker(
            self._connection, self.worker_id, self.queues, self.threads, self.stats.finished
        )

    def _heartbeat_ids(self) -> list[int]:
        # Hung jobs already have their outcome buffered; lost ones belong to another worker.
        return [
            job_id
            for job_id, job in self._claimed.items()
            if job_id not in self._executors.lost and not self._executors.abandoned(job)
        ]

    def _prune(self) -> float:
        """Delete expired history in bounded batches; returns seconds until the next prune."""
        pruned = operations.prune(self._connection)
        # A full batch means more is due: come back soon, without hogging the loop.
        return 1.0 if pruned.more else settings.PRUNE_INTERVAL

    # ----- shutdown --------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Hand back unstarted jobs, wait for running ones, write every outcome."""
        unstarted = self._executors.take_unstarted()
        deadline = time.monotonic() + self.shutdown_timeout
        backoff = Backoff()
        released = False
        while True:
            try:
                if unstarted and not released:
                    handed = operations.release(self._connection, self.worker_id, unstarted)
                    released = True
                    self.stats.released += len(handed)
                    for job_id in unstarted:
                        self._claimed.pop(job_id, None)
                    if handed:
                        logger.info(
                            "Handed %d unstarted jobs back to the queue (worker %s)",
                            len(handed),
                            self.worker_id,
                        )
                if self._outcomes:
                    self._flush()
                if not self._claimed:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    logger.warning(
                        "Worker %s: shutdown timeout with %d jobs still running; they will be "
                        "reclaimed after the visibility timeout",
                        self.worker_id,
                        len(self._claimed),
                    )
                    break
                self._drain_events(min(remaining, settings.HEARTBEAT_INTERVAL))
                if self._claimed and time.monotonic() - deadline < 0:
                    self._heartbeat()
            except DATABASE_ERRORS as exc:
                logger.warning(
                    "Worker %s: queue database error during shutdown (%s)", self.worker_id, exc
                )
                self._connection.close()
                if time.monotonic() >= deadline:
                    break
                time.sleep(backoff.failed())
        try:
            operations.stop_worker(self._connection, self.worker_id, self.stats.finished)
        except DATABASE_ERRORS:
            logger.warning("Could not mark worker %s stopped", self.worker_id)
