"""Workflows in the tables: a child's edges, a batch's row and seal, what a job reads of them.

The release, the cascade and a batch's finish are the triggers' (``sql.flow``); these write what
an enqueue adds and read what a job, the API or the admin asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_pgqueue.exceptions import UnknownParent
from django_pgqueue.operations.db import Database
from django_pgqueue.operations.rows import decode_json
from django_pgqueue.sql import dumps
from django_pgqueue.sql import flow as sql
from django_pgqueue.states import JobStatus


def check_parents(db: Database, parents: Sequence[int]) -> None:
    """Raise :class:`UnknownParent` naming the ``parents`` that do not exist."""
    with db.cursor() as cursor:
        cursor.execute(sql.EXISTING, [list(parents)])
        found = {row[0] for row in cursor.fetchall()}
    missing = [p for p in parents if p not in found]
    if missing:
        named = ", ".join(f"#{p}" for p in missing)
        raise UnknownParent(
            f"after= names job {named}, which does not exist (never enqueued, or pruned since: "
            "a finished job is kept only while a dependent of it has not ended)"
        )


def insert_edges(db: Database, children: Sequence[int], parents: Sequence[int]) -> None:
    """Each of ``children`` waits for each of ``parents`` (checked as the transaction commits)."""
    with db.cursor() as cursor:
        cursor.execute(sql.INSERT_EDGES, [list(children), list(parents)])


def create_batch(
    db: Database, description: str, callbacks: dict[str, dict[str, Any] | None]
) -> int:
    """Insert a batch in the current transaction of ``db``; its id."""
    with db.cursor() as cursor:
        cursor.execute(
            sql.INSERT_BATCH,
            [
                description,
                *(
                    None if callbacks.get(name) is None else dumps(callbacks[name])
                    for name in ("on_success", "on_failure", "on_complete")
                ),
            ],
        )
        return int(cursor.fetchone()[0])


def seal_batch(db: Database, batch_id: int) -> None:
    """The batch's block closed and its members are committed: count them from now on, and
    finish it at once if none is active."""
    with db.cursor() as cursor:
        cursor.execute(sql.SEAL_BATCH, [batch_id])


def batch_counts(db: Database, batch_id: int) -> dict[str, int]:
    """The batch's members by status, every status present (0: none)."""
    counts = {status.value: 0 for status in JobStatus}
    with db.cursor() as cursor:
        cursor.execute(sql.BATCH_COUNTS, [batch_id])
        for status, count in cursor.fetchall():
            counts[status] = int(count)
    return counts


def batch_of(db: Database, job_id: int) -> int | None:
    """The batch ``job_id`` is a member of, or whose callback it is."""
    with db.cursor() as cursor:
        cursor.execute(sql.BATCH_OF, [job_id])
        row = cursor.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def parent_results(db: Database, job_id: int) -> dict[int, Any]:
    """``{parent id: its stored result}`` of the jobs ``job_id`` was enqueued after."""
    with db.cursor() as cursor:
        cursor.execute(sql.PARENT_RESULTS, [job_id])
        rows = cursor.fetchall()
    return {int(parent): _decoded(result) for parent, result in rows}


def _decoded(value: Any) -> Any:
    """A jsonb value as a cursor hands it: text on Django's connection, decoded on psycopg's."""
    return decode_json(value) if isinstance(value, str) else value


def parents(db: Database, job_id: int) -> list[tuple[int, str | None]]:
    """The jobs ``job_id`` waits (or waited) for: ``(id, status)``, None for one deleted."""
    with db.cursor() as cursor:
        cursor.execute(sql.PARENTS, [job_id])
        return [(int(i), s) for i, s in cursor.fetchall()]


def dependents(db: Database, job_id: int) -> list[tuple[int, str]]:
    """The jobs that wait (or waited) for ``job_id``: ``(id, status)``."""
    with db.cursor() as cursor:
        cursor.execute(sql.DEPENDENTS, [job_id])
        return [(int(i), s) for i, s in cursor.fetchall()]
