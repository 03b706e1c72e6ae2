"""Writing outcomes back: one statement per flush, committed without waiting for the disk, made
durable by the worker's next commit that waits.

The loop writes a flush's outcomes with an asynchronous commit (``synchronous_commit = off``
for that statement alone). Other sessions see them at once; only durability comes later. On a
loaded server the wait was the costliest part of the write: the backend sleeps in its WAL
flush and then waits for a CPU a second time, while the loop, which claims, waits too
(docs/performance.md, "Outcomes without waiting for the disk").

A commit that waits for its WAL flushes everything the connection committed before it. The
worker's next claim that takes a job is such a commit; when none comes within
``PGQUEUE_FLUSH_INTERVAL``, the loop makes one of its own (``operations.make_durable``), and
so does the shutdown. Until then the outcomes are :class:`Unconfirmed`: the journal does not
mark them written (if the process dies, its supervisor writes them again), and a lost
connection hands them back to the buffer, to be written again once the server is back.
Writing one again is safe either way: if a server crash lost it, its job is still ``running``
under this worker's lock and the outcome is written; if it was kept, the job is no longer
running and nothing matches.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.operations import Database, Outcome
from django_pgqueue.printable import get_logger
from django_pgqueue.worker.counts import WorkerStats
from django_pgqueue.worker.journal import Journal

logger = get_logger("django_pgqueue.worker")


@dataclass(frozen=True)
class Flushed:
    """What one flush wrote."""

    #: The outcomes written (their jobs are no longer the executors' business).
    outcomes: Sequence[Outcome]
    #: When (monotonic) the earliest retry among them is due, if any.
    retry_at: float | None
    #: Those counted: written for the first time, and taken by the database (not lost to
    #: another worker).
    counted: Sequence[Outcome] = ()


class WriteBack:
    """A worker's outcomes from the moment an executor reports one until it is on disk:
    buffered (to be written by the next :meth:`flush`), then :class:`Unconfirmed` (written, not
    yet known to be durable) until :meth:`confirmed` or :meth:`make_durable`.

    It writes on ``db`` (the worker's connection) under ``worker_id`` and counts what it wrote
    in ``stats``; the worker decides when to flush, and forgets the jobs a flush wrote.
    """

    def __init__(
        self, db: Database, worker_id: str, stats: WorkerStats, journal: Journal | None
    ) -> None:
        self._db = db
        self._worker_id = worker_id
        self._stats = stats
        self._buffer: list[Outcome] = []
        self._unconfirmed = Unconfirmed(journal)

    @property
    def buffered(self) -> Sequence[Outcome]:
        """The outcomes waiting for the next flush, oldest first."""
        return self._buffer

    def add(self, outcome: Outcome) -> None:
        """An outcome an executor reported, to be written."""
        self._buffer.append(outcome)

    def extend(self, outcomes: Sequence[Outcome]) -> None:
        """Outcomes the worker decided itself (a hung job failed, a dead thread's job)."""
        self._buffer += outcomes

    def job_ids(self) -> list[int]:
        """The jobs whose outcome is buffered or not yet known to be on disk (a crash of the
        server may have put such a job back to running under this worker's lock)."""
        return [*(o.job_id for o in self._buffer), *self._unconfirmed.job_ids()]

    def flush(self) -> Flushed:
        """Write the buffered outcomes in one statement, committed without waiting for the
        disk. If it fails they stay buffered, before any reported since: written later, never
        lost."""
        outcomes, self._buffer = self._buffer, []
        try:
            written = operations.finish(
                self._db,
                self._worker_id,
                outcomes,
                delete_completed=settings.RETENTION <= 0,
                asynchronous=True,
            )
        except BaseException:
            self._buffer = outcomes + self._buffer
            raise
        self._unconfirmed.add(outcomes)
        logger.debug("Worker %s wrote %d outcomes", self._worker_id, len(written))
        first = self._unconfirmed.first_writes(self._worker_id, outcomes, written)
        retry_at = self._stats.count_written(self._worker_id, first, written)
        counted = [o for o in first if o.job_id in written]
        if retry_at is None:
            return Flushed(outcomes, None, counted)
        wait = max(0.0, (retry_at - timezone.now()).total_seconds())
        return Flushed(outcomes, time.monotonic() + wait, counted)

    @property
    def durable_deadline(self) -> float | None:
        """When (monotonic) :meth:`make_durable` is due if no claim has confirmed them."""
        return self._unconfirmed.deadline

    def durable_due(self, now: float) -> bool:
        return self._unconfirmed.due(now)

    def confirmed(self) -> None:
        """A commit that waited for the disk returned on the worker's connection (a claim
        that took jobs): everything written before it is durable."""
        self._unconfirmed.confirmed()

    def make_durable(self) -> None:
        """Wait until the outcomes written so far are on disk (one statement, if any)."""
        if self._unconfirmed:
            operations.make_durable(self._db)
            self._unconfirmed.confirmed()

    def connection_lost(self) -> None:
        """Outcomes not known to be on disk go back to the buffer, written again on
        reconnect."""
        self._buffer = self._unconfirmed.take_back() + self._buffer


class Unconfirmed:
    """Outcomes written with an asynchronous commit and not yet known to be on disk."""

    def __init__(self, journal: Journal | None) -> None:
        self._journal = journal
        self._outcomes: list[Outcome] = []
        #: When (monotonic) the loop confirms them itself if no claim has.
        self.deadline: float | None = None
        #: Jobs whose outcome is being written again: already counted.
        self._again: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self._outcomes)

    def job_ids(self) -> list[int]:
        return [outcome.job_id for outcome in self._outcomes]

    def add(self, outcomes: list[Outcome]) -> None:
        if outcomes and self.deadline is None:
            self.deadline = time.monotonic() + settings.FLUSH_INTERVAL
        self._outcomes += outcomes

    def due(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def confirmed(self) -> None:
        """A commit that waited for the disk has returned on the connection they were written
        on, after them: they are durable."""
        outcomes, self._outcomes, self.deadline = self._outcomes, [], None
        if self._journal is not None:
            self._journal.written(o.job_id for o in outcomes)

    def take_back(self) -> list[Outcome]:
        """The connection was lost: the outcomes, to be written again."""
        outcomes, self._outcomes, self.deadline = self._outcomes, [], None
        self._again.update(o.job_id for o in outcomes)
        return outcomes

    def first_writes(
        self, worker_id: str, outcomes: list[Outcome], written: set[int]
    ) -> list[Outcome]:
        """``outcomes`` but those being written again (counted when first written)."""
        if not self._again:
            return outcomes
        again = {o.job_id for o in outcomes} & self._again
        self._again -= again
        if lost := again & written:
            # Still running under our lock: the server lost the first write (a crash before
            # its WAL reached disk). Kept ones match nothing, their jobs no longer running.
            logger.info(
                "Worker %s: written again: %d outcomes the database had shown as written and "
                "then lost (asynchronous commits not yet on disk when it went down)",
                worker_id,
                len(lost),
            )
        return [o for o in outcomes if o.job_id not in again]
