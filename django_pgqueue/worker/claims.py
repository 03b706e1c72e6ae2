"""The worker's claims: one statement for up to ``limit`` jobs, stale-job recovery about once
a second, how long to sleep when nothing was left to claim, and when finished jobs call for
another look at once."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.operations import DATABASE_ERRORS, Outcome
from django_pgqueue.printable import get_logger
from django_pgqueue.worker.connection import QueueConnection

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = get_logger("django_pgqueue.worker")

# How long the loop waits before looking again when runnable jobs exist that it could not
# claim (held by another claim, or waiting for their concurrency key).
BLOCKED_RECHECK = 0.2
# How often a claim also takes back the jobs of workers that stopped heartbeating.
RECLAIM_INTERVAL = 1.0


class Claimer:
    """Claims for one worker on its connection."""

    def __init__(
        self,
        connection: QueueConnection,
        worker_id: str,
        queues: Sequence[str] | None,
        *,
        burst: bool,
    ) -> None:
        self.connection = connection
        self.worker_id = worker_id
        self.queues = queues
        self.burst = burst
        self.next_reclaim = 0.0  # when the next claim also takes back stale jobs
        self.stale_scan = operations.StaleScan()
        #: Some queue has settings (paused, limits): claim with the statements that obey them.
        self.controlled = False
        self._recycle_due = False

    def claim(self, limit: int) -> tuple[list[Job], int]:
        """Up to ``limit`` jobs, and the rows taken (jobs found dead in the claim count: the
        claim was not short of work)."""
        reclaim = time.monotonic() >= self.next_reclaim
        jobs, taken = self._claim_once(limit, reclaim=reclaim)
        if taken < limit and not reclaim and self.burst:
            # A burst ends when a claim comes up short: look for stale jobs too before that.
            more, more_taken = self._claim_once(limit - taken, reclaim=True)
            jobs += more
            taken += more_taken
        logger.debug("Worker %s claimed %d of %d jobs asked", self.worker_id, taken, limit)
        return jobs, taken

    def _claim_once(self, limit: int, *, reclaim: bool) -> tuple[list[Job], int]:
        if reclaim:
            self.next_reclaim = time.monotonic() + RECLAIM_INTERVAL
        claimed = operations.claim_counted(
            self.connection,
            self.worker_id,
            self.queues,
            limit,
            settings.VISIBILITY_TIMEOUT,
            reclaim=reclaim,
            controlled=self.controlled,
            stale_scan=self.stale_scan,
        )
        if reclaim:
            self._recycle_due = True
        return claimed

    def recycle(self) -> None:
        """After a claim that also reclaimed, once its jobs are on their way: truncate the
        ready-ring slots that inserts moved past and claims emptied. Not in the claim itself,
        so the jobs it took do not wait for two more round trips (and a TRUNCATE)."""
        if not self._recycle_due:
            return
        try:
            operations.recycle(self.connection)
        except DATABASE_ERRORS as exc:
            # The jobs are claimed and on their way; the next statement meets a lost connection
            # and the loop's backoff takes over. The slots wait for the next round.
            logger.warning("Worker %s: could not recycle the ready ring: %s", self.worker_id, exc)
            return
        self._recycle_due = False

    def may_unblock(self, claimed: Mapping[int, Job], outcomes: Iterable[Outcome]) -> bool:
        """Whether writing ``outcomes`` of ``claimed`` jobs may make a pending job runnable,
        so the loop claims again at once: a job of a concurrency key frees its key, any job a
        place under its queue's limit; a burst always looks (it ends on a short claim).

        Otherwise nothing became runnable, and the loop waits as the last short claim left it
        to: one claim and one ``next_run_after`` per batch instead of two, at a steady rate.
        """
        if self.burst or self.controlled:
            return True
        return any(
            (job := claimed.get(outcome.job_id)) is not None and job.concurrency_key
            for outcome in outcomes
        )

    def idle_until(self) -> float:
        """Nothing runnable was left: sleep until a NOTIFY, the next run_after or the poll."""
        now = time.monotonic()
        poll = now + settings.POLL_INTERVAL
        next_run = operations.next_run_after(
            self.connection, self.queues, controlled=self.controlled
        )
        if next_run is None:
            logger.debug(
                "Worker %s: nothing pending; sleeping up to %.2fs", self.worker_id, poll - now
            )
            return poll
        seconds = (next_run - timezone.now()).total_seconds()
        # A scheduled job due by then is moved into the ready ring by the claim that also
        # reclaims: make the next claim one.
        self.next_reclaim = min(self.next_reclaim, now + max(seconds, 0.0))
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
