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
            if outcome.status == JobStatus.CANCELLED:
                self.cancelled += 1
            elif outcome.status == JobStatus.COMPLETED:
                self.completed += 1
            elif outcome.outcome == Attempt.INTERRUPTED:
                self.interrupted += 1
            elif outcome.outcome == Attempt.RETRIED:
                self.retried += 1
                if outcome.run_after is not None and (
                    retry_at is None or outcome.run_after < retry_at
                ):
                    retry_at = outcome.run_after
            else:
                self.dead += 1
        return retry_at
