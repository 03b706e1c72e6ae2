"""The benchmark's jobs, registered only when a benchmark runs (never at import)."""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass

from django_pgqueue.decorators import JobFunction, job

# Names, not import paths: kept as they were before the tool moved to contrib/ (so were
# scenarios.load.SLEEP and chaos.run.CHAOS_JOB), like the figures and logs that mention them.
NOOP = "django_pgqueue.bench.noop"
RECORD_START = "django_pgqueue.bench.record_start"
ASYNC_NOOP = "django_pgqueue.bench.async_noop"
ASYNC_SLEEP = "django_pgqueue.bench.async_sleep"
CPU = "django_pgqueue.bench.cpu"
ASYNC_QUERY = "django_pgqueue.bench.async_query"


def noop() -> None:
    """The job every throughput figure runs: does nothing, returns nothing."""
    return None


def record_start() -> float:
    """Returns the wall clock at the first line of the job function (the pickup phase)."""
    return time.time()


async def async_noop() -> None:
    """The async throughput figure's job (``--scenario async``): awaits nothing."""
    return None


async def async_sleep(seconds: float) -> None:
    """A job that waits (an HTTP call's stand-in): awaits ``seconds``."""
    await asyncio.sleep(seconds)


def _query(ms: float) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(%s::float8)", [ms / 1000])


async def async_query(ms: float, one_thread: bool) -> None:
    """A query that takes ``ms`` on the server, from async code: on Django's one thread for
    sync code (``one_thread``, what the async ORM does) or on the executor's threads."""
    from asgiref.sync import sync_to_async

    await sync_to_async(_query, thread_sensitive=one_thread)(ms)


def cpu(ms: float) -> None:
    """A sync job that keeps its thread busy computing for ``ms`` milliseconds."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


@dataclass(frozen=True)
class BenchJobs:
    noop: JobFunction[[], None]
    record_start: JobFunction[[], float]
    async_noop: JobFunction[[], object]
    async_sleep: JobFunction[[float], object]
    cpu: JobFunction[[float], None]
    async_query: JobFunction[[float, bool], object]


@functools.cache
def register() -> BenchJobs:
    """Register the benchmark's jobs in this process (and so in the workers it forks)."""
    return BenchJobs(
        noop=job(name=NOOP, max_attempts=1)(noop),
        record_start=job(name=RECORD_START, max_attempts=1)(record_start),
        async_noop=job(name=ASYNC_NOOP, max_attempts=1)(async_noop),
        async_sleep=job(name=ASYNC_SLEEP, max_attempts=1)(async_sleep),
        cpu=job(name=CPU, max_attempts=1)(cpu),
        async_query=job(name=ASYNC_QUERY, max_attempts=1)(async_query),
    )
