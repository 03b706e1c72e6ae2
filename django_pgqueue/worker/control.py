"""What the worker loop does for runtime control of the jobs it holds: it passes cancellation
requests on to them and writes the progress they report.

A ``cancel()`` of a running job sends ``NOTIFY pgqueue_control, 'cancel'``; the listener turns
it into :meth:`RunningControl.notified`, and the next :meth:`~RunningControl.tick` looks up which
of this worker's jobs were asked to stop (one statement by primary key). Without a listener
(``PGQUEUE_LISTEN = False``, or while it reconnects) the tick polls every
:data:`CANCEL_POLL_INTERVAL` seconds while the worker holds jobs; every heartbeat also reports
them. Progress is written at most every :data:`PROGRESS_INTERVAL` seconds, only when a job
reported some.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django_pgqueue import operations
from django_pgqueue.operations import Database
from django_pgqueue.printable import get_logger
from django_pgqueue.worker.executors import Executors

logger = get_logger("django_pgqueue.worker")

#: Without LISTEN, how often a worker holding jobs asks whether any was cancelled.
CANCEL_POLL_INTERVAL = 0.5
#: How often reported progress is written.
PROGRESS_INTERVAL = 1.0


class RunningControl:
    def __init__(self, executors: Executors, listening: Callable[[], bool]) -> None:
        self._executors = executors
        self._listening = listening
        self._notified = False
        self._next_poll = 0.0
        self._next_progress = 0.0

    def notified(self) -> None:
        """A cancellation was requested somewhere (or the listener reconnected): look now."""
        self._notified = True

    def next_due(self, now: float) -> float:
        """When :meth:`tick` has something to do (monotonic), while the worker holds jobs."""
        if self._notified:
            return now
        due = self._next_progress
        if not self._listening():
            due = min(due, self._next_poll)
        return due

    def tick(self, db: Database, worker_id: str, held: Sequence[int], now: float) -> None:
        """Pass on cancellations and write progress, when due."""
        if self._notified or (now >= self._next_poll and not self._listening()):
            self._notified = False
            self._next_poll = now + CANCEL_POLL_INTERVAL
            if held:
                self.cancel(operations.cancel_requested(db, worker_id, held))
        if now >= self._next_progress:
            self._next_progress = now + PROGRESS_INTERVAL
            progress = self._executors.take_progress()
            if progress:
                operations.save_progress(db, worker_id, progress)

    def cancel(self, job_ids: set[int]) -> None:
        """Tell the jobs ``job_ids`` they were asked to stop (those already told: no-op)."""
        if job_ids:
            logger.debug("Jobs asked to stop: %s", ", ".join(map(str, sorted(job_ids))))
            self._executors.request_cancel(job_ids)
