"""The storage's invariants (``docs/storage.md``): finding their violations, restoring them.

:func:`violations` is what ``manage.py check --database`` reports and ``pgqueue_repair
--dry-run`` shows; :func:`repair` is ``pgqueue_repair`` and the workers' own look every
``PGQUEUE_REPAIR_INTERVAL`` seconds. Both work from the job table, the truth: every ready row
is derived from it, so repairing means deleting rows that disagree with their jobs and
deriving the missing ones again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django_pgqueue.operations.db import Database
from django_pgqueue.sql import integrity as sql

#: The seconds a repair round of a worker may take (``RepairRounds``), and the most ranges one
#: of its statements reads (a step): a range costs up to about five times more where its jobs
#: went through their states under a pinned horizon (each state a row version the scan visits)
#: than in old history, and a step is chosen by the cost of the one before.
ROUND_BUDGET = 0.003
STEP_RANGES = 2

#: Jobs (or rows) one repair statement handles; :func:`repair` repeats until none are left.
REPAIR_BATCH = 1000


@dataclass(frozen=True)
class Violation:
    """Jobs (or rate windows) that break one invariant: how many, and the first few ids."""

    kind: str
    count: int
    first_ids: tuple[int | str, ...]


def storage_ready(db: Database) -> bool:
    """Whether the tables this module checks exist (migrated up to ``0012``)."""
    with db.cursor() as cursor:
        cursor.execute(sql.STORAGE_READY)
        return bool(cursor.fetchone()[0])


#: The whole id space, as a range of the queries of ``sql.integrity``.
_EVERY_ID = {"lo": 0, "hi": 2**63 - 1}


def violations(db: Database) -> list[Violation]:
    """Each kind of violation found, in one snapshot (kinds with none are left out)."""
    with db.cursor() as cursor:
        cursor.execute(sql.VIOLATIONS, _EVERY_ID)
        rows = cursor.fetchall()
    return [
        Violation(
            str(kind),
            int(count),
            tuple(str(i) if kind in sql.NAMED_KINDS else int(i) for i in first or ()),
        )
        for kind, count, first in rows
        if count
    ]


@dataclass
class Repaired:
    """What :func:`repair` changed: the jobs whose rows were derived again, and the jobs
    (gone or not pending) whose rows were deleted."""

    rederived: list[int] = field(default_factory=list)
    orphans_dropped: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rederived or self.orphans_dropped)

    def extend(self, other: Repaired) -> None:
        self.rederived.extend(other.rederived)
        self.orphans_dropped.extend(other.orphans_dropped)


def repair(db: Database, *, batch: int = REPAIR_BATCH) -> Repaired:
    """Restore the invariants: each pending job gets exactly the ready row it should have, and
    rows of jobs gone or not pending are deleted. Safe while workers claim: a job a claim has locked
    is left alone (``SKIP LOCKED``), so nothing runs twice and nothing is lost. Idempotent.

    The id space is repaired a range at a time (``sql.REPAIR_RANGE`` ids), as the workers' rounds
    do: no statement reads more than a range, whatever the table's size.
    """
    with db.cursor() as cursor:
        cursor.execute(sql.ID_BOUNDS)
        low, high = cursor.fetchone()
    done = Repaired()
    if high is None:
        return done
    for lo in range(low - low % sql.REPAIR_RANGE, high + 1, sql.REPAIR_RANGE):
        done.extend(repair_range(db, lo, lo + sql.REPAIR_RANGE, batch=batch))
    return done


def repair_range(db: Database, lo: int, hi: int, *, batch: int = REPAIR_BATCH) -> Repaired:
    """:func:`repair` for the job ids in ``[lo, hi)``, ``batch`` jobs of each kind at a time:
    the stray rows are deleted as they are found; the suspects are locked and their rows
    derived again in a transaction of their own (where there are any)."""
    done = Repaired()
    suspects: int | None = lo  # where each kind's next batch starts (None: done)
    strays: int | None = lo
    while suspects is not None or strays is not None:
        params = {"batch": batch, "lo": suspects, "strays": strays, "hi": hi}
        with db.atomic(), db.cursor() as cursor:
            cursor.execute(sql.CHECK_RANGE, {k: hi if v is None else v for k, v in params.items()})
            suspects, found, strays, dropped = cursor.fetchone()
        done.orphans_dropped.extend(dropped)
        if found:
            # A real transaction, also on the worker's autocommit connection: the locks must
            # last until the rows are derived again.
            with db.transaction(), db.cursor() as cursor:
                cursor.execute(sql.LOCK_PENDING, {"ids": found})
                (locked,) = cursor.fetchone()
                if locked:
                    cursor.execute(sql.REDERIVE, {"ids": locked})
            done.rederived.extend(locked)
    return done


def repair_workflows(db: Database) -> None:
    """Count workflows again from the jobs and their edges (F1-F3, B1 in docs/storage.md):
    each child's parents left, each parent's mark, each sealed batch's tally; release or cancel
    the waiting jobs that should be, finish or re-open the batches that should be. In one
    transaction, the edges and tallies locked: a parent or member ending meanwhile waits for
    it, then counts on what it wrote. For ``pgqueue_repair``; idempotent."""
    with db.transaction(), db.cursor() as cursor:
        for statement in sql.REPAIR_WORKFLOWS:
            cursor.execute(statement)


@dataclass
class RepairRounds:
    """The workers' own repair (docs/storage.md, "Self-healing"). Each round repairs the next
    ranges of job ids (``sql.REPAIR_RANGE`` each), numbered by a position every worker shares,
    so that together the workers go over the whole table once every ``interval`` seconds.

    A round takes as many ranges as ``budget`` seconds (its statements, as the worker waits for
    them) have room for at the cost of its last ones, and at least one: whatever the table's
    size or the horizon, its cost is about the budget, or one range where a range costs more.
    A worker alone owes the table's ranges once an interval. With others, the position moved
    by their rounds between two of its own says how many repair: it owes that many times less,
    so the database does one pass an interval whatever the number of workers.
    """

    interval: float
    budget: float = ROUND_BUDGET
    clock: Callable[[], float] = time.monotonic
    #: Ranges due (a worker's first round repairs one).
    owed: float = 1.0
    #: The number of the oldest job's range (None: not read yet; then learnt at each wrap this
    #: worker makes), and of this worker's last one.
    first: int | None = None
    last: int | None = None
    #: What this worker last saw: the ranges a pass has, the workers repairing, the ranges it
    #: took in its last round, and when that round was (``clock``).
    ranges: int = 1
    workers: float = 1.0
    taken: int = 0
    at: float | None = None
    #: Seconds a range took, in this worker's last step; seconds and ranges of its last round.
    cost: float = ROUND_BUDGET
    spent: float = 0.0
    just_taken: int = 0

    def round(self, db: Database) -> tuple[Repaired, float]:
        """Repair the ranges due; returns what changed and the seconds to the next round."""
        now = self.clock()
        if self.at is not None:
            due = (now - self.at) * self.ranges / self.interval / self.workers
            self.owed = min(self.owed + due, self.ranges)
        self.at = now
        done = Repaired()
        taken = 0
        started = time.perf_counter()
        while self.owed >= 1:
            # As many ranges as the budget left has room for, at the cost of the last ones:
            # one at a time where they are dear (a pinned horizon), many where they are cheap.
            room = (self.budget - (time.perf_counter() - started)) / self.cost
            if taken and room < 1:
                break
            step_started = time.perf_counter()
            numbers = self._next(db, max(1, min(int(self.owed), int(room), STEP_RANGES)))
            if not numbers:  # no jobs
                self.owed = 0.0
                break
            if taken == 0:
                self._count_workers(numbers[0])
            for lo, hi in _spans(numbers):
                done.extend(repair_range(db, lo * sql.REPAIR_RANGE, hi * sql.REPAIR_RANGE))
            taken += len(numbers)
            self.last = numbers[-1]
            self.owed -= len(numbers)
            self.cost = (time.perf_counter() - step_started) / len(numbers)
        if taken:
            self.taken = taken
        self.spent, self.just_taken = time.perf_counter() - started, taken
        wait = (1 - self.owed) * self.interval * self.workers / self.ranges
        return done, min(max(wait, 0.0), self.interval)

    def _next(self, db: Database, count: int) -> list[int]:
        """The numbers of the next ``count`` ranges to repair (fewer at the end of a pass; none:
        no jobs)."""
        with db.cursor() as cursor:
            cursor.execute(sql.NEXT_RANGES, {"count": count})
            numbers, newest = cursor.fetchone()
            if newest is None:
                return []
            if self.first is None:
                cursor.execute(sql.FIRST_RANGE)
                self.first = int(cursor.fetchone()[0])
            newest_range = int(newest) // sql.REPAIR_RANGE
            numbers = [int(n) for n in numbers if self.first <= n <= newest_range]
            if not numbers:
                # Past the newest job (or before the oldest): the next pass starts here.
                cursor.execute(sql.RESTART_PASS)
                self.first = int(cursor.fetchone()[0])
                numbers = [self.first]
        self.ranges = max(newest_range - self.first + 1, 1)
        return numbers

    def _count_workers(self, number: int) -> None:
        """From the first range of a round: how many workers repair (every range taken since
        this worker's last round, over the ranges it took then)."""
        if self.last is None or not self.taken:
            return
        assert self.first is not None
        if number > self.last:
            since = number - self.last - 1
        else:  # the position wrapped in between
            since = (self.first + self.ranges - 1 - self.last) + (number - self.first)
        self.workers = max((since + self.taken) / self.taken, 1.0)


def _spans(numbers: list[int]) -> list[tuple[int, int]]:
    """Consecutive range numbers joined: ``[3, 4, 5, 9]`` -> ``[(3, 6), (9, 10)]``."""
    spans: list[tuple[int, int]] = []
    for n in numbers:
        if spans and spans[-1][1] == n:
            spans[-1] = (spans[-1][0], n + 1)
        else:
            spans.append((n, n + 1))
    return spans
