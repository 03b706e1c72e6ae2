"""Jobs of tests/test_pool.py: each uses the ORM, and records which process, thread and server
connection ran it (in ``pool_runs``, a table the test makes)."""

from __future__ import annotations

import os
import threading
import time

from django.db import connection, transaction

from django_pgqueue import current_job, job

#: The table the jobs write their runs in (tests/test_pool.py makes and drops it).
RUNS_TABLE = "pool_runs"


def _record(job_id: int | None, kind: str, cursor: object) -> None:
    cursor.execute(  # type: ignore[attr-defined]
        f"INSERT INTO {RUNS_TABLE} (job_id, kind, pid, thread, backend, in_transaction, "
        "application_name) VALUES (%s, %s, %s, %s, pg_backend_pid(), "
        "now() <> statement_timestamp(), current_setting('application_name'))",
        [job_id, kind, os.getpid(), threading.get_ident()],
    )


@job(max_attempts=1)
def uses_orm(n: int, sleep: float = 0.0) -> int:
    """Counts the table, records its run in its own transaction (autocommit), and sleeps
    ``sleep`` seconds holding its connection."""
    with connection.cursor() as cursor:
        _record(current_job().id, "orm", cursor)
    if sleep:
        time.sleep(sleep)
    return n


@job(max_attempts=1)
def leaves_open(n: int) -> None:
    """Records its run inside ``transaction.atomic()`` and returns without leaving the block:
    the run is rolled back, the attempt fails (TransactionLeftOpen)."""
    transaction.atomic().__enter__()
    with connection.cursor() as cursor:
        _record(current_job().id, "open", cursor)


@job(max_attempts=1)
def raises(n: int) -> None:
    """Records its run, then fails inside a transaction."""
    with connection.cursor() as cursor:
        _record(current_job().id, "raises", cursor)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        raise RuntimeError(f"job {n} fails")


@job(max_attempts=1)
def kills_connection(n: int) -> None:
    """Records its run, then has the server end its connection: the attempt fails, and the
    broken connection must not go back to the pool."""
    with connection.cursor() as cursor:
        _record(current_job().id, "kills", cursor)
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


@job(max_attempts=1, timeout=0.3)
def overruns(n: int, sleep: float = 2.0) -> None:
    """Records its run and holds its connection past its timeout: the loop fails it and
    abandons its thread, which gives the connection back when the function returns."""
    with connection.cursor() as cursor:
        _record(current_job().id, "overruns", cursor)
    time.sleep(sleep)


@job(max_attempts=1)
def until_cancelled(n: int) -> None:
    """Records its run, then holds its connection until it is cancelled, and returns."""
    with connection.cursor() as cursor:
        _record(current_job().id, "cancellable", cursor)
    while not current_job().cancel_requested:
        time.sleep(0.02)
