"""What the worker loop does for runtime control: it keeps the queues' settings (paused,
limits) it claims by, passes cancellation requests on to its jobs and writes their progress.

Queue settings (:class:`QueueSettings`) are read at start, when ``NOTIFY pgqueue_control,
'queues'`` says they changed, and every :data:`QUEUE_SETTINGS_POLL` seconds without a listener
(:data:`QUEUE_SETTINGS_LISTENING` with one, as a safety net). While no queue has settings the
worker claims with the plain statements, which never look at ``pgqueue_queue``.

A ``cancel()`` of a running job sends ``NOTIFY pgqueue_control, 'cancel'``; the listener turns
it into :meth:`RunningControl.notified`, and the next :meth:`~RunningControl.tick` looks up which
of this worker's jobs were asked to stop (one statement by primary key). Without a listener
(``PGQUEUE_LISTEN = False``, or while it reconnects) the tick polls every
:data:`CANCEL_POLL_INTERVAL` seconds while the worker has jobs in hand; every heartbeat also
reports them. Progress is written at most every :data:`PROGRESS_INTERVAL` seconds, only when a
job reported some.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django_pgqueue import operations
from django_pgqueue.operations import Database
from django_pgqueue.printable import get_logger
from django_pgqueue.worker.executors import Executors

if TYPE_CHECKING:
    from django_pgqueue.worker.aio import AsyncJobs

logger = get_logger("django_pgqueue.worker")

#: Without LISTEN, how often a worker with jobs in hand asks whether any was cancelled.
CANCEL_POLL_INTERVAL = 0.5
#: How often reported progress is written.
PROGRESS_INTERVAL = 1.0
#: How often the queues' settings are read without LISTEN (pause and resume within a second)...
QUEUE_SETTINGS_POLL = 0.5
#: ... and with it (NOTIFY brings every change at once; this only covers a lost notification).
QUEUE_SETTINGS_LISTENING = 10.0


@dataclass(frozen=True)
class ControlEvent:
    """For the loop: a runtime-control notification (``cancel``, ``queues``, or
    ``reconnected``)."""

    payload: str


class QueueSettings:
    """The queues' runtime settings as this worker last read them."""

    def __init__(self) -> None:
        self.controls: list[operations.QueueControl] = []

    def read(self, db: Database) -> bool:
        """Read them again; returns whether they changed. (Whether limited jobs wait, the
        other half of which claim runs, the claim reads itself: ``operations.ClaimPath``.)"""
        controls = operations.queue_controls(db)
        changed = controls != self.controls
        if changed:
            paused = sorted(c.name for c in controls if c.paused)
            logger.info("Queue settings changed; paused: %s", ", ".join(paused) or "none")
        self.controls = controls
        return changed


class RunningControl:
    def __init__(
        self,
        executors: Executors,
        listening: Callable[[], bool],
        async_jobs: AsyncJobs | None = None,
    ) -> None:
        self._executors = executors
        #: The event loop's jobs (``worker.aio``): told of cancellations, asked for progress.
        self._async = async_jobs
        self._listening = listening
        self._notified = False
        self._next_poll = 0.0
        self._next_progress = 0.0

    def notified(self) -> None:
        """A cancellation was requested somewhere (or the listener reconnected): look now."""
        self._notified = True

    def next_due(self, now: float) -> float:
        """When :meth:`tick` has something to do (monotonic), while the worker has jobs in hand."""
        if self._notified:
            return now
        due = self._next_progress
        if not self._listening():
            due = min(due, self._next_poll)
        return due

    def tick(self, db: Database, worker_id: str, in_hand: Sequence[int], now: float) -> None:
        """Pass on cancellations and write progress, when due."""
        if self._notified or (now >= self._next_poll and not self._listening()):
            self._notified = False
            self._next_poll = now + CANCEL_POLL_INTERVAL
            if in_hand:
                self.cancel(operations.cancel_requested(db, worker_id, in_hand))
        if now >= self._next_progress:
            self._next_progress = now + PROGRESS_INTERVAL
            progress = self._executors.take_progress()
            if self._async is not None:
                progress.update(self._async.take_progress())
            if progress:
                operations.save_progress(db, worker_id, progress)

    def cancel(self, job_ids: set[int]) -> None:
        """Tell the jobs ``job_ids`` they were asked to stop (those already told: no-op)."""
        if job_ids:
            logger.debug("Jobs asked to stop: %s", ", ".join(map(str, sorted(job_ids))))
            self._executors.request_cancel(job_ids)
            if self._async is not None:
                self._async.request_cancel(job_ids)
