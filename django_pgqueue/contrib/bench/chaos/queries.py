"""The statements the chaos run makes of its own; queue operations go through ``operations``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connections

from django_pgqueue.conf import settings
from django_pgqueue.sql import TABLE
from django_pgqueue.states import JobStatus

#: Every connection of the workers the run started (their application names), not ours.
TERMINATE_WORKERS = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE application_name LIKE 'pgqueue %%' AND datname = current_database() "
    "AND pid <> pg_backend_pid()"
)
DATA_DIRECTORY = "SHOW data_directory"
#: The first completion of a job enqueued at or after a moment (the recovery after a fault).
FIRST_COMPLETED_SINCE = (
    f"SELECT min(finished_at) FROM {TABLE} WHERE queue = %s AND created_at >= %s "
    f"AND status = '{JobStatus.COMPLETED}'"
)
ACTIVE = (
    f"SELECT count(*) FROM {TABLE} WHERE queue = %s "
    f"AND status IN ('{JobStatus.PENDING}', '{JobStatus.RUNNING}')"
)
#: Each job of the run: its number (the first argument) and its status.
JOBS = f"SELECT (args->>0)::bigint, status FROM {TABLE} WHERE queue = %s"


@contextmanager
def cursor() -> Iterator[Any]:
    with connections[settings.DATABASE].cursor() as cur:
        yield cur


def fetchall(query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with cursor() as cur:
        cur.execute(query, params)
        return list(cur.fetchall())


def fetchone(query: str, params: Sequence[Any] = ()) -> Any:
    rows = fetchall(query, params)
    return rows[0][0] if rows else None
