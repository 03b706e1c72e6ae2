"""What one worker did: its counters, kept as outcomes are written back."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from django_pgqueue.operations import Outcome
from django_pgqueue.printable import get_logger
from django_pgqueue.states import Attempt, JobStatus

logger = get_logger("django_pgqueue.worker")


@dataclass
class WorkerStats:
    claimed: int = 0
    finished: int = 0
    completed: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    lost: int = 0
    cancelled: int = 0
    #: Handed back because this worker shut down under them.
    interrupted: int = 0

    def count_written(
        self, worker_id: str, outcomes: Iterable[Outcome], written: Collection[int]
    ) -> datetime | None:
        """Count a flush's outcomes (``written``: the ids the database took); returns when the
        earliest retry among them is due, if any."""
        retry_at: datetime | None = None
        for outcome in outcomes:
            self.finished += 1
            if outcome.job_id not in written:
                self.lost += 1
                logger.warning(
                    "Worker %s: job #%d's outcome %s dropped; its lock expired and another "
                    "worker owns it",
                    worker_id,
                    outcome.job_id,
                    outcome.outcome,
                )
                continue
            attempt = attempt_of(outcome)
            if attempt == Attempt.CANCELLED:
                self.cancelled += 1
            elif attempt == Attempt.COMPLETED:
                self.completed += 1
            elif attempt == Attempt.INTERRUPTED:
                self.interrupted += 1
            elif attempt == Attempt.RETRIED:
                self.retried += 1
                if outcome.run_after is not None and (
                    retry_at is None or outcome.run_after < retry_at
                ):
                    retry_at = outcome.run_after
            else:
                self.dead += 1
        return retry_at


def attempt_of(outcome: Outcome) -> Attempt:
    """How an attempt ended, as the worker counts it (and its metrics label it)."""
    if outcome.status == JobStatus.CANCELLED:
        return Attempt.CANCELLED
    if outcome.status == JobStatus.COMPLETED:
        return Attempt.COMPLETED
    if outcome.outcome == Attempt.INTERRUPTED:
        return Attempt.INTERRUPTED
    if outcome.outcome == Attempt.RETRIED:
        return Attempt.RETRIED
    return Attempt.DEAD
