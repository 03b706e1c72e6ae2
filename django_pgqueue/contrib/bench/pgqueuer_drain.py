"""``--compare``'s pgqueuer drain, where pgqueuer is installed (``pip install
"django-pgqueue-jobs[compare]"``).

pgqueuer's schema is installed under a scratch prefix (``pgqueue_bench_<random>_``: its tables,
type, function, trigger and NOTIFY channel all carry it), so an installation of pgqueuer's own
in this database is neither read nor touched, nor woken; the benchmark uninstalls what it
installed after the drain (after an error or Ctrl-C too). ``jobs`` no-op jobs go in with one
batched ``Queries.enqueue``; P forked processes each run a ``QueueManager`` with an async no-op
entrypoint in ``QueueExecutionMode.drain``, on one psycopg connection each, on the event loop
pgqueuer's ``pgq run`` would use (uvloop where it is installed), everything else at pgqueuer's
defaults. The times come from pgqueuer's log table: the first ``picked`` row to the last
``successful`` one.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Coroutine
from datetime import datetime
from importlib import metadata
from typing import TYPE_CHECKING, Any

import psycopg

from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import BackendCPU, watch_drain
from django_pgqueue.contrib.bench.progress import NoProgress, Progress
from django_pgqueue.contrib.bench.results import BenchError, DrainRun
from django_pgqueue.contrib.bench.workers import FunctionProcess

if TYPE_CHECKING:
    from pgqueuer import Queries

PREFIX = "pgqueue_bench_"
APPLICATION_PREFIX = "pgqueue bench pgqueuer "
ENTRYPOINT = "noop"
#: Jobs run, the first pick and the last success (pgqueuer's log), jobs left in its queue.
OUTCOME = """
SELECT count(*) FILTER (WHERE status = 'successful'),
       min(created) FILTER (WHERE status = 'picked'),
       max(created) FILTER (WHERE status = 'successful'),
       (SELECT count(*) FROM {queue})
FROM {log}
"""


def missing() -> str | None:
    """Why pgqueuer cannot be drained here; None when it can."""
    try:
        import pgqueuer  # noqa: F401
    except ImportError as exc:
        return f'{exc}; pip install "django-pgqueue-jobs[compare]"'
    return None


def version() -> str:
    return metadata.version("pgqueuer")


def event_loop() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def _run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """As ``pgq run`` runs its manager: on uvloop where it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def _queries(connection: psycopg.AsyncConnection[Any], prefix: str) -> Queries:
    from pgqueuer import PsycopgDriver, Queries
    from pgqueuer.adapters.persistence import qb
    from pgqueuer.domain.settings import DBSettings

    names = DBSettings(prefix=prefix)
    return Queries(
        PsycopgDriver(connection),
        qbe=qb.QueryBuilderEnvironment(names),
        qbq=qb.QueryQueueBuilder(names),
        qbs=qb.QuerySchedulerBuilder(names),
    )


async def _connect(conninfo: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(conninfo, autocommit=True)


async def _install_and_enqueue(conninfo: str, prefix: str, jobs: int) -> None:
    async with await _connect(conninfo) as connection:
        queries = _queries(connection, prefix)
        await queries.install()
        await queries.enqueue([ENTRYPOINT] * jobs, [None] * jobs, [0] * jobs)


async def _outcome(conninfo: str, prefix: str) -> tuple[int, datetime, datetime, int]:
    async with await _connect(conninfo) as connection:
        names = _queries(connection, prefix).qbe.settings
        query = OUTCOME.format(queue=names.queue_table, log=names.queue_table_log)
        cursor = await connection.execute(query)
        row = await cursor.fetchone()
    if row is None:
        raise BenchError("pgqueuer's outcome returned no row")
    return int(row[0]), row[1], row[2], int(row[3])


async def _uninstall(conninfo: str, prefix: str) -> None:
    async with await _connect(conninfo) as connection:
        await _queries(connection, prefix).uninstall()


def work(conninfo: str, prefix: str, batch_size: int) -> None:
    """One pgqueuer worker (in a forked child): a QueueManager in drain mode."""
    # pgqueuer's process-wide settings, for anything that reads them rather than ours.
    os.environ["PGQUEUER_PREFIX"] = prefix

    async def main() -> None:
        from pgqueuer import Job, QueueManager
        from pgqueuer.types import Channel, QueueExecutionMode

        async with await _connect(conninfo) as connection:
            queries = _queries(connection, prefix)
            manager = QueueManager(queries, channel=Channel(queries.qbe.settings.channel))

            @manager.entrypoint(ENTRYPOINT)
            async def noop(job: Job) -> None:
                return None

            await manager.run(batch_size=batch_size, mode=QueueExecutionMode.drain)

    _run(main())


def drain(jobs: int, processes: int, batch_size: int, progress: Progress | None = None) -> DrainRun:
    """``jobs`` no-op jobs enqueued into a scratch pgqueuer schema, drained by ``processes``."""
    progress = progress or NoProgress()
    prefix = PREFIX + secrets.token_hex(6) + "_"
    setup = database.conninfo(f"{APPLICATION_PREFIX}{prefix}:setup")
    children: list[FunctionProcess] = []
    try:
        progress.start(f"pgqueuer: {jobs:,} jobs into {prefix}pgqueuer")
        _run(_install_and_enqueue(setup, prefix, jobs))
        progress.finish("")
        progress.start(f"pgqueuer: drain with {processes} processes")
        backends = BackendCPU(f"{APPLICATION_PREFIX}{prefix}:w")
        started_wall = time.time()
        for number in range(processes):
            conninfo = database.conninfo(f"{APPLICATION_PREFIX}{prefix}:w{number}")
            child = FunctionProcess(work, conninfo, prefix, batch_size)
            children.append(child)
            child.start()
        watch_drain(children, backends)
        done, first, last, left = _run(_outcome(setup, prefix))
        if done != jobs or left:
            raise BenchError(f"pgqueuer ran {done} of {jobs} jobs and left {left} in its queue")
        result = DrainRun.of_processes(
            "pgqueuer", jobs, started_wall, first, last, children, backends.total
        )
        progress.finish(f"{result.per_s_from_fork:,.0f} jobs/s")
        return result
    finally:
        for child in children:
            child.stop()
        _run(_uninstall(setup, prefix))
