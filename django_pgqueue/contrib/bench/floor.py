"""``--compare``'s raw-SQL floor: the statements of ``floor.sql``, drained by P processes of
plain psycopg 3, each claiming 100 jobs, calling a no-op function per job looked up by its name,
and completing the batch in one statement, until a claim comes back empty.

The table is a scratch one, ``pgqueue_bench_floor_<random>``, made for one drain and dropped
after it (after an error or Ctrl-C too).
"""

from __future__ import annotations

import functools
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import BackendCPU, watch_drain
from django_pgqueue.contrib.bench.progress import NoProgress, Progress
from django_pgqueue.contrib.bench.results import BenchError, DrainRun
from django_pgqueue.contrib.bench.workers import FunctionProcess

FLOOR_SQL = Path(__file__).with_name("floor.sql")
TABLE_PREFIX = "pgqueue_bench_floor_"
#: The floor's connections in ``pg_stat_activity``: this, the table's name, ``:`` and the
#: worker's number (``setup`` for the benchmark's own).
APPLICATION_PREFIX = "pgqueue bench floor "
NOOP = "noop"
#: Jobs per claim: the claim's ``LIMIT`` in ``floor.sql``, written there as a constant.
BATCH_SIZE = 100


def noop() -> None:
    """The floor's job: does nothing, returns nothing."""
    return None


#: The job functions by name, as a queue's registry would have them.
FUNCTIONS: dict[str, Callable[..., Any]] = {NOOP: noop}


@functools.cache
def statements() -> dict[str, str]:
    """``floor.sql``'s statements by their ``-- name:``."""
    found: dict[str, str] = {}
    parts = re.split(r"^-- name: (\w+)\n", FLOOR_SQL.read_text(), flags=re.MULTILINE)
    for name, text in zip(parts[1::2], parts[2::2], strict=True):
        found[name] = text.strip()
    return found


def statement(name: str, table: str, connection: psycopg.Connection[Any]) -> str:
    """Statement ``name`` of ``floor.sql`` for ``table``, as the text the server receives."""
    query = sql.SQL(statements()[name]).format(
        table=sql.Identifier(table), index=sql.Identifier(f"{table}_pending")
    )
    return query.as_string(connection)


def work(conninfo: str, table: str, worker: str) -> None:
    """One floor worker (in a forked child): claim, run, complete, until nothing is left."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        claim = statement("claim", table, connection)
        complete = statement("complete", table, connection)
        params = {"worker": worker}
        while True:
            rows = connection.execute(claim, params).fetchall()
            if not rows:
                return
            for _, name, args in rows:
                FUNCTIONS[name](*args)
            connection.execute(complete, {"ids": [row[0] for row in rows]})


def _setup_connection(table: str) -> psycopg.Connection[Any]:
    return psycopg.connect(database.conninfo(f"{APPLICATION_PREFIX}{table}:setup"), autocommit=True)


def drain(jobs: int, processes: int, progress: Progress | None = None) -> DrainRun:
    """``jobs`` no-op jobs inserted into a new scratch table, drained by ``processes``."""
    progress = progress or NoProgress()
    table = TABLE_PREFIX + secrets.token_hex(6)
    children: list[FunctionProcess] = []
    try:
        progress.start(f"floor: {jobs:,} jobs into {table}")
        with _setup_connection(table) as connection:
            for name in ("create", "index"):
                connection.execute(statement(name, table, connection))
            connection.execute(
                statement("enqueue", table, connection), {"name": NOOP, "jobs": jobs}
            )
            connection.execute(statement("analyze", table, connection))
        progress.finish("")
        progress.start(f"floor: drain with {processes} processes")
        backends = BackendCPU(f"{APPLICATION_PREFIX}{table}:w")
        started_wall = time.time()
        for number in range(processes):
            child = FunctionProcess(
                work,
                database.conninfo(f"{APPLICATION_PREFIX}{table}:w{number}"),
                table,
                f"floor-{number}",
            )
            children.append(child)
            child.start()
        watch_drain(children, backends)
        with _setup_connection(table) as connection:
            row = connection.execute(statement("outcome", table, connection)).fetchone()
        if row is None:
            raise BenchError("The floor's outcome returned no row")
        completed, total, first, last = row
        if completed != jobs or total != jobs:
            raise BenchError(f"The floor completed {completed} of {total} jobs, not {jobs}")
        result = DrainRun.of_processes(
            "floor", jobs, started_wall, first, last, children, backends.total
        )
        progress.finish(f"{result.per_s_from_fork:,.0f} jobs/s")
        return result
    finally:
        for child in children:
            child.stop()
        with _setup_connection(table) as connection:
            connection.execute(statement("drop", table, connection))
