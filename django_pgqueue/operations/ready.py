"""The ready ring's upkeep (``sql.ready``): promoting due scheduled jobs, recycling slots."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django_pgqueue.operations.db import Database
from django_pgqueue.sql import claim as claim_sql
from django_pgqueue.sql import held as held_sql
from django_pgqueue.sql import parked as parked_sql
from django_pgqueue.sql import ready as sql

#: Due scheduled jobs moved into the ring per statement.
PROMOTE_BATCH = 5000


def promote(db: Database, limit: int = PROMOTE_BATCH) -> int:
    """Move due rows of the later partition into the ring; returns how many moved."""
    with db.cursor() as cursor:
        cursor.execute(sql.PROMOTE, [limit])
        return int(cursor.rowcount)


def recycle(db: Database) -> list[int]:
    """TRUNCATE the ring slots that inserts have moved past and claims have emptied.

    Each slot is tried alone, with ``NOWAIT``: one in use by a claim or an insert is left for
    the next round. Returns the slots truncated.
    """
    with db.cursor() as cursor:
        cursor.execute(sql.RECYCLABLE)
        candidates = [int(row[0]) for row in cursor.fetchall()]
        truncated = []
        for slot in candidates:
            cursor.execute(sql.RECYCLE, [slot])
            row = cursor.fetchone()
            if row and row[0]:
                truncated.append(slot)
    return truncated


def sweep_parked(db: Database, batch: int = PROMOTE_BATCH) -> int:
    """Park the ring rows of paused queues (those that came in after the pause; at most
    ``batch`` per queue, the rest at the next call), and put back the parked rows of queues no
    longer paused (those a park racing a resume left). Returns how many went back into the
    ring: claimable now."""
    back = 0
    with db.cursor() as cursor:
        cursor.execute(parked_sql.MISPLACED)
        for queue, park in cursor.fetchall():
            if park:
                cursor.execute(parked_sql.PARK_BATCH, [queue, batch])
            else:
                cursor.execute(parked_sql.UNPARK_QUEUE, [queue])
                back += int(cursor.rowcount)
    return back


def sweep_held(db: Database, batch: int = PROMOTE_BATCH) -> int:
    """Hold the ring rows of concurrency and rate keys, and of queues with limits of their own,
    beyond the few the ring keeps of each (at most ``batch``, the rest at the next call), and
    put back held rows of those with fewer left in the ring. Returns how many went back into
    the ring: claimable now.

    A probe first (``SWEEP_DUE``): with no key or limited queue in sight, nothing else runs."""
    with db.cursor() as cursor:
        cursor.execute(held_sql.SWEEP_DUE)
        if not cursor.fetchone()[0]:
            return 0
        cursor.execute(held_sql.SWEEP, {"batch": batch})
        return int(cursor.fetchone()[0])


def slot_counts(db: Database) -> dict[int, int]:
    """Rows per slot (-1: the later partition, -2: the parked one, -3: the held one)."""
    with db.cursor() as cursor:
        cursor.execute(sql.SLOT_COUNTS)
        return {int(slot): int(count) for slot, count in cursor.fetchall()}


@dataclass
class StaleScan:
    """Where a worker's next stale-job scan starts (``None``: at the beginning).

    After a scan that took fewer jobs than it could, everything locked before its cutoff was
    seen, so the next starts ``margin`` seconds before that cutoff (for claims and heartbeats
    that commit a little after their ``now()``). Every ``full_every`` seconds a scan starts at
    the beginning again, for locks an operator set back by hand. Under a pinned xmin horizon
    that scan walks the dead entries of every job finished since (600,000 after ten minutes
    at 1,000 jobs/s, a slow claim), so it runs rarely.
    """

    margin: float = 5.0
    full_every: float = 1800.0
    since: datetime | None = None
    last_full: datetime | None = None

    def start(self, db: Database, visibility_timeout: float) -> datetime | None:
        """The ``since`` of the scan about to run (and the database's clock, remembered)."""
        with db.cursor() as cursor:
            cursor.execute(claim_sql.DATABASE_NOW)
            now: datetime = cursor.fetchone()[0]
        self._cutoff = now - timedelta(seconds=visibility_timeout + self.margin)
        if self.last_full is None or (now - self.last_full).total_seconds() >= self.full_every:
            self.last_full = now
            self.since = None
        return self.since

    def done(self, complete: bool) -> None:
        """The scan ran; ``complete``: it took fewer rows than its limit."""
        if complete:
            self.since = self._cutoff
