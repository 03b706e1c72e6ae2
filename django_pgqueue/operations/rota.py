"""The wake rota's statements: the live workers, and a wake passed on (``worker.rota``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django_pgqueue.operations.db import Database
from django_pgqueue.operations.rows import decode_json
from django_pgqueue.sql import enqueue as enqueue_sql
from django_pgqueue.sql import rota as sql


@dataclass(frozen=True, order=True)
class Peer:
    """A live worker, as its row and its connections show it."""

    worker_id: str
    #: The queues it serves (empty: all).
    queues: tuple[str, ...]
    #: Whether its listening connection is open (it hears job notifications).
    listening: bool

    def serves(self, queue: str) -> bool:
        return not self.queues or queue in self.queues


def peers(db: Database, alive: float) -> list[Peer]:
    """The workers not stopped and seen within ``alive`` seconds, sorted by id as
    ``pgqueue_wake()`` sorts them (``sql.rota.PEERS`` does)."""
    with db.cursor() as cursor:
        cursor.execute(sql.PEERS, {"alive": alive})
        rows = cursor.fetchall()
    return [
        Peer(str(worker_id), _queues(queues), bool(listening))
        for worker_id, queues, listening in rows
    ]


def _queues(value: Any) -> tuple[str, ...]:
    """The ``queues`` column: a list (psycopg's jsonb loader) or its text (Django's)."""
    if isinstance(value, str):
        value = decode_json(value)
    return tuple(str(q) for q in value or ())


def pass_wake(
    db: Database,
    worker_id: str,
    queue: str,
    ticket: int,
    jobs: int,
    hops: int,
    kinds: str | None = None,
) -> None:
    """Wake ``worker_id`` (on its own channel) for ``jobs`` jobs of ``queue``, with ``ticket``
    (``hops`` so far, so that a wake nobody can take goes round once) and the jobs' ``kinds``
    (``'s'``, ``'a'``, ``'sa'``; None: unknown)."""
    with db.cursor() as cursor:
        cursor.execute(
            enqueue_sql.PASS_WAKE,
            {
                "channel": sql.channel(worker_id),
                "queue": queue,
                "ticket": ticket,
                "jobs": jobs,
                "hops": hops,
                "kinds": kinds,
            },
        )


def mark_listening(db: Database, worker_id: str, listener: str | None = None) -> None:
    """The worker's listening connection is open (the listener, once it LISTENs): its own, or
    (``listener``, a tag) the relay's that listens for it (``worker.relay``)."""
    with db.cursor() as cursor:
        cursor.execute(sql.MARK_LISTENING, {"id": worker_id, "listener": listener})
