"""The benchmark's jobs, registered only when a benchmark runs (never at import)."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

from django_pgqueue.decorators import JobFunction, job

# Names, not import paths: kept as they were before the tool moved to contrib/ (so were
# scenarios.load.SLEEP and chaos.run.CHAOS_JOB), like the figures and logs that mention them.
NOOP = "django_pgqueue.bench.noop"
RECORD_START = "django_pgqueue.bench.record_start"


def noop() -> None:
    """The job every throughput figure runs: does nothing, returns nothing."""
    return None


def record_start() -> float:
    """Returns the wall clock at the first line of the job function (the pickup phase)."""
    return time.time()


@dataclass(frozen=True)
class BenchJobs:
    noop: JobFunction[[], None]
    record_start: JobFunction[[], float]


@functools.cache
def register() -> BenchJobs:
    """Register the benchmark's jobs in this process (and so in the workers it forks)."""
    return BenchJobs(
        noop=job(name=NOOP, max_attempts=1)(noop),
        record_start=job(name=RECORD_START, max_attempts=1)(record_start),
    )
