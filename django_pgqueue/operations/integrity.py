"""The storage's invariants (``docs/storage.md``): finding their violations, restoring them.

:func:`violations` is what ``manage.py check --database`` reports and ``pgqueue_repair
--dry-run`` shows; :func:`repair` is ``pgqueue_repair`` and the workers' own look every
``PGQUEUE_REPAIR_INTERVAL`` seconds. Both work from the job table, the truth: every ready row
is derived from it, so repairing means deleting rows that disagree with their jobs and
deriving the missing ones again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django_pgqueue.operations.db import Database
from django_pgqueue.sql import integrity as sql

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


def violations(db: Database) -> list[Violation]:
    """Each kind of violation found, in one snapshot (kinds with none are left out)."""
    with db.cursor() as cursor:
        cursor.execute(sql.VIOLATIONS)
        rows = cursor.fetchall()
    return [
        Violation(
            str(kind),
            int(count),
            tuple(str(i) if kind == "misshapen_windows" else int(i) for i in first or ()),
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


def repair(db: Database, *, batch: int = REPAIR_BATCH, rounds: int | None = None) -> Repaired:
    """Restore the invariants: each pending job gets exactly the ready row it should have, and
    rows of jobs gone or not pending are deleted. Safe while workers claim: a job a claim has locked
    is left alone (``SKIP LOCKED``), so nothing runs twice and nothing is lost. Idempotent.

    ``rounds``: at most that many statements of each kind (the workers' look does one, so a
    round's cost is bounded); ``None`` repeats until nothing is left to repair.
    """
    done = Repaired()
    for statement, found in (
        (sql.REPAIR_JOBS, done.rederived),
        (sql.DROP_ORPHANS, done.orphans_dropped),
    ):
        n = 0
        while rounds is None or n < rounds:
            n += 1
            with db.atomic(), db.cursor() as cursor:
                cursor.execute(statement, {"batch": batch})
                ids = [int(row[0]) for row in cursor.fetchall()]
            found.extend(ids)
            if len(ids) < batch:
                break
    return done
