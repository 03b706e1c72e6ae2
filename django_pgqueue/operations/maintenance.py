"""Keeping the tables small, and the worker table's rows."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from django_pgqueue.conf import settings
from django_pgqueue.operations.db import Database
from django_pgqueue.sql import dumps
from django_pgqueue.sql import maintenance as sql

#: Rows of workers not seen for this long are deleted by the other workers' pruning.
WORKER_ROW_RETENTION = 3600.0


@dataclass(frozen=True)
class Pruned:
    deleted: int
    #: A batch came back full: more is due now.
    more: bool


def prune(db: Database) -> Pruned:
    """Delete finished jobs past their retention in bounded batches, finished batches whose
    members are all gone, and workers long gone."""
    batch = settings.PRUNE_BATCH_SIZE
    with db.cursor() as cursor:
        cursor.execute(sql.PRUNE, [settings.RETENTION, batch])
        deleted = cursor.rowcount
        more = deleted >= batch
        dead_retention = settings.DEAD_RETENTION
        if dead_retention is not None:
            cursor.execute(sql.PRUNE_DEAD, [dead_retention, batch])
            deleted += cursor.rowcount
            more = more or cursor.rowcount >= batch
        cursor.execute(sql.PRUNE_BATCHES, [settings.RETENTION, batch])
        cursor.execute(sql.PRUNE_WORKERS, [WORKER_ROW_RETENTION])
    return Pruned(deleted, more)


def report_worker(
    db: Database,
    worker_id: str,
    queues: Sequence[str] | None,
    threads: int,
    jobs_done: int,
    abandoned: Sequence[int] = (),
    listening: bool = False,
    listener: str | None = None,
) -> tuple[str, int] | None:
    """Insert or refresh this worker's row (on every heartbeat); returns the host and pid the
    row named before, if it existed: another process's, under a ``worker_id`` both use.

    ``abandoned``: the jobs whose abandoned attempt's thread still runs in this worker;
    ``listening``: whether its listening connection is open (``enqueue()`` may wake it);
    ``listener``: the tag of that connection when another process's (``worker.relay``)."""
    with db.cursor() as cursor:
        cursor.execute(
            sql.UPSERT_WORKER,
            {
                "id": worker_id,
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "queues": dumps(list(queues or [])),
                "threads": threads,
                "jobs_done": jobs_done,
                "abandoned": dumps(sorted(set(abandoned))),
                "listening": listening,
                "listener": listener,
            },
        )
        row = cursor.fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def stop_worker(db: Database, worker_id: str, jobs_done: int) -> None:
    with db.cursor() as cursor:
        cursor.execute(sql.STOP_WORKER, [jobs_done, worker_id])
