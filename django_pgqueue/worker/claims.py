"""The worker's claims: one statement for up to ``limit`` jobs, stale-job recovery about once
a second, how long to sleep when nothing was left to claim, and when finished jobs call for
another look at once."""

from __future__ import annotations

import os
import random
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.operations import DATABASE_ERRORS, Outcome
from django_pgqueue.printable import get_logger
from django_pgqueue.worker.connection import QueueConnection
from django_pgqueue.worker.rota import Rota

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = get_logger("django_pgqueue.worker")

# How long the loop waits before looking again when runnable jobs exist that it could not
# claim (locked by another claim, or waiting for their concurrency key).
BLOCKED_RECHECK = 0.2
# How often a claim also takes back the jobs of workers that stopped heartbeating (one worker
# alone; spread over the workers sharing its queues: ``Rota.spread``).
RECLAIM_INTERVAL = 1.0
# How old the worker's reading of which claim the database needs may grow (a change of the
# queues' settings is heard at once, through NOTIFY; limited jobs come without one).
CLAIM_PATH_MAX_AGE = 0.5
# A worker's first repair round comes within this many seconds of its start; its rounds are
# this many seconds apart at least (each a few milliseconds of statements at most).
FIRST_REPAIR_WITHIN = 2.0
REPAIR_GAP = 0.25


class Claimer:
    """Claims for one worker on its connection."""

    def __init__(
        self,
        connection: QueueConnection,
        worker_id: str,
        queues: Sequence[str] | None,
        *,
        burst: bool,
        rota: Rota | None = None,
    ) -> None:
        self.connection = connection
        #: The live workers: idle waits are spread over them (None: this worker alone).
        self.rota = rota
        self.worker_id = worker_id
        self.queues = queues
        self.burst = burst
        self.next_reclaim = 0.0  # when the next claim also takes back stale jobs
        # When the upkeep next repairs a range of job ids the storage may have lost track of
        # (not at once: a worker's start stays quick, and workers started together spread).
        self.next_repair = time.monotonic() + random.uniform(0, FIRST_REPAIR_WITHIN)
        self.repair_rounds = operations.RepairRounds(settings.REPAIR_INTERVAL)
        self.stale_scan = operations.StaleScan()
        #: Which claim the database needs (the limited one while some queue has settings or
        #: limited jobs wait), read again twice a second at most, and after a NOTIFY.
        self.path = operations.ClaimPath(max_age=CLAIM_PATH_MAX_AGE)
        #: The connection was lost: a claim may have committed without its answer reaching
        #: the worker. :meth:`settle` hands such jobs back once the connection is back.
        self.unsettled = False
        #: Another running process uses this worker id (:meth:`reported`): settling could
        #: take its jobs, so it hands nothing back.
        self.id_shared = False
        self._reported = False

    def claim(self, limit: int, take: Callable[[list[Job]], None], *, async_limit: int = 0) -> int:
        """Up to ``limit`` runnable sync jobs and ``async_limit`` async ones, handed to
        ``take``; then, once they are on their way, :meth:`_upkeep` when due. Returns the rows
        taken (jobs found dead in the claim count: the claim was not short of work)."""
        jobs, taken = self._claim_once(limit, reclaim=False, async_limit=async_limit)
        logger.debug(
            "Worker %s claimed %d of %d + %d async jobs asked",
            self.worker_id,
            taken,
            limit,
            async_limit,
        )
        take(jobs)
        if time.monotonic() >= self.next_reclaim or (
            self.burst and _short_of_work(jobs, taken, limit, async_limit)
        ):
            jobs, more = self._upkeep(limit, taken, async_limit)
            take(jobs)
            taken += more
        if time.monotonic() >= self.next_repair:
            self._repair()
        return taken

    def settle(self, known_ids: Iterable[int]) -> int:
        """After a lost connection, before anything else on the new one: hand back (pending,
        no attempt spent) the jobs the database shows in this worker's hand that it does not
        know of (``known_ids``: claimed, or with an outcome to write). A claim that committed
        while its answer was lost left them ``running`` under this worker's name, and they
        would wait for the visibility timeout and be charged a ``WorkerLost`` attempt.

        A claim still running on the server when this looks (the connection cut on the
        worker's side only) commits after it: its jobs are left to the visibility timeout.
        Worker ids are unique among running workers (``--worker-id``: docs/worker.md).
        Returns how many were handed back."""
        handed = (
            set()
            if self.id_shared
            else operations.release_unknown(self.connection, self.worker_id, list(known_ids))
        )
        self.unsettled = False
        if handed:
            logger.warning(
                "Worker %s: handed back %d jobs a claim took while its answer was lost with "
                "the connection: %s",
                self.worker_id,
                len(handed),
                ", ".join(f"#{job_id}" for job_id in sorted(handed)),
            )
        return len(handed)

    def reported(self, before: tuple[str, int] | None) -> None:
        """The worker's row named ``before`` (host, pid) when its heartbeat refreshed it. Once
        this process has written the row, another name there means another process runs
        under the same worker id and wrote it since."""
        # (None: the row was pruned while this worker was cut off, not taken.)
        ours = (socket.gethostname(), os.getpid())
        if self._reported and before is not None and before != ours and not self.id_shared:
            self.id_shared = True
            logger.error(
                "Worker %s: another process (%s, pid %s) runs under this worker id too: give "
                "each run_jobs its own --worker-id. Recovering a dead process's jobs and "
                "handing back those of a claim whose answer was lost go by worker id and could "
                "take the other's running jobs; this worker no longer hands any back.",
                self.worker_id,
                *before,
            )
        self._reported = True

    def _upkeep(self, limit: int, taken: int, async_limit: int = 0) -> tuple[list[Job], int]:
        """About once a second, and before a burst ends on a short claim: move due scheduled
        jobs into the ring, take back up to ``limit`` jobs of workers that stopped heartbeating
        (and the promoted ones, within what the claim, which took ``taken``, left), recycle the
        ring.

        After the claim, not before: its jobs would wait for four more round trips (a pickup's
        p99). A database error is logged, not raised: the claimed jobs are on their way, and
        the loop meets a lost connection on its next statement.
        """
        try:
            claimed = self._claim_once(
                limit, reclaim=True, fresh=limit + async_limit - taken, async_limit=async_limit
            )
            # Ready-ring slots that inserts moved past and claims emptied are truncated.
            operations.recycle(self.connection)
        except DATABASE_ERRORS as exc:
            logger.warning("Worker %s: stale-job recovery failed: %s", self.worker_id, exc)
            self.unsettled = True  # its claim may have committed all the same
            return [], 0
        return claimed

    def repair_when_due(self) -> float:
        """The housekeeping's turn at the repair: a round if one is due (an idle worker's
        rounds come this way, without a claim before each); the seconds until the next."""
        if time.monotonic() >= self.next_repair:
            self._repair()
        return max(self.next_repair - time.monotonic(), REPAIR_GAP)

    def _repair(self) -> None:
        """Put back pending jobs no claim can reach, and drop ready rows of jobs gone or not
        pending (docs/storage.md, "Self-healing"): a round of ranges of job ids, after a claim
        (its jobs already on their way), paced so that the workers together go over the table
        once every ``PGQUEUE_REPAIR_INTERVAL``, a round every ``REPAIR_GAP`` seconds at most.
        A database error is logged, not raised: the loop meets a lost connection on its next
        statement."""
        rounds = self.repair_rounds
        self.next_repair = time.monotonic() + settings.REPAIR_INTERVAL  # if the round fails
        try:
            repaired, gap = rounds.round(self.connection)
        except DATABASE_ERRORS as exc:
            logger.warning("Worker %s: repair round failed: %s", self.worker_id, exc)
            return
        self.next_repair = time.monotonic() + max(gap, REPAIR_GAP)
        logger.debug(
            "Worker %s: repair round, %d ranges in %.2f ms (next in %.2f s)",
            self.worker_id,
            rounds.just_taken,
            rounds.spent * 1000,
            max(gap, REPAIR_GAP),
        )
        if repaired.rederived:
            logger.warning(
                "Worker %s: %d pending jobs had lost their ready rows (restored with triggers "
                "off?) and are runnable again: %s",
                self.worker_id,
                len(repaired.rederived),
                ", ".join(f"#{i}" for i in repaired.rederived[:20]),
            )
        if repaired.orphans_dropped:
            logger.info(
                "Worker %s: dropped the stray ready rows of %d jobs gone or not pending",
                self.worker_id,
                len(repaired.orphans_dropped),
            )

    def _claim_once(
        self, limit: int, *, reclaim: bool, fresh: int | None = None, async_limit: int = 0
    ) -> tuple[list[Job], int]:
        if reclaim:
            # The fleet's: with many workers sharing its queues, each reclaims that much less.
            self.next_reclaim = time.monotonic() + self._spread(RECLAIM_INTERVAL)
        request = operations.ClaimRequest(
            worker_id=self.worker_id,
            limit=limit,
            async_limit=async_limit,
            queues=self.queues,
            visibility_timeout=settings.VISIBILITY_TIMEOUT,
            reclaim=reclaim,
            fresh=fresh,
        )
        return operations.claim(
            self.connection, request, path=self.path, stale_scan=self.stale_scan
        )

    def may_unblock(self, claimed: Mapping[int, Job], outcomes: Iterable[Outcome]) -> bool:
        """Whether writing ``outcomes`` of ``claimed`` jobs may make a pending job runnable,
        so the loop claims again at once: a job of a concurrency key frees its key, any job a
        place under its queue's limit; a burst always looks (it ends on a short claim).

        Otherwise nothing became runnable, and the loop waits as the last short claim left it
        to: one claim and one ``next_run_after`` per batch instead of two, at a steady rate.
        """
        if self.burst or self.path.limited:
            return True
        return any(
            (job := claimed.get(outcome.job_id)) is not None and job.concurrency_key
            for outcome in outcomes
        )

    def _spread(self, seconds: float) -> float:
        return seconds if self.rota is None else self.rota.spread(seconds)

    def idle_until(self) -> float:
        """Nothing runnable was left: sleep until a NOTIFY, the next run_after or the poll.

        The poll and the recheck of blocked jobs are the fleet's (``Rota.spread``: every worker
        sharing a queue with this one counts), and of the idle workers only the rota's pick
        wakes when the next scheduled job is due: the others' polls are its safety net."""
        now = time.monotonic()
        # The poll (the repair rounds of an idle worker are the housekeeping's: no claim).
        wake = now + self._spread(settings.POLL_INTERVAL)
        ready, next_run = operations.next_run_after(
            self.connection, self.queues, controlled=self.path.limited
        )
        due: float | None = None  # seconds until the earliest pending job is runnable
        if next_run is not None:
            due = max((next_run - timezone.now()).total_seconds(), 0.0)
            if self.rota is not None and not self.rota.mine_any(round(next_run.timestamp() * 1e3)):
                due = None  # another idle worker's turn: this one polls
        if due is not None:
            # A scheduled job is moved into the ready ring by the claim that also reclaims
            # (the upkeep): make the claim that comes when it is due one. Due but not moved
            # yet (another worker's promotion has it locked, say): look again soon.
            self.next_reclaim = min(self.next_reclaim, now + due)
            wake = min(wake, now + (due or BLOCKED_RECHECK))
        if ready:
            # In the ring, locked by another claim or waiting for its concurrency key: a plain
            # claim takes it once free.
            due = 0.0
            wake = min(wake, now + self._spread(BLOCKED_RECHECK))
        if due is None:
            logger.debug(
                "Worker %s: nothing pending; sleeping up to %.2fs", self.worker_id, wake - now
            )
        else:
            logger.debug(
                "Worker %s: next job due in %.2fs; sleeping up to %.2fs",
                self.worker_id,
                due,
                wake - now,
            )
        return wake


def _short_of_work(jobs: list[Job], taken: int, limit: int, async_limit: int) -> bool:
    """Whether a claim that asked for ``limit`` sync and ``async_limit`` async jobs and took
    ``taken`` rows (``jobs`` and those found dead) found every kind it asked for short: then the
    queue may have run dry, and a burst looks for stale and due jobs before it ends. One kind
    full is not short (a drain of sync jobs asks for async ones too, and finds none: its every
    claim ran the upkeep, a dozen statements, before this)."""
    async_taken = sum(1 for job in jobs if job.is_async)
    sync_full = limit > 0 and taken - async_taken >= limit
    async_full = async_limit > 0 and async_taken >= async_limit
    return not (sync_full or async_full)
