"""What a benchmark run is asked to do and what it found."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_pgqueue.conf import settings

if TYPE_CHECKING:
    from django_pgqueue.contrib.bench.workers import ForkedProcess

QUEUE_PREFIX = "pgqueue-bench-"
#: The keys of the JSON object ``pgqueue_bench --json`` prints, in order.
RESULT_KEYS = (
    "enqueue_bulk_per_s",
    "enqueue_single_ms_p50",
    "enqueue_single_ms_p99",
    "drain_per_s",
    "pickup_ms_p50",
    "pickup_ms_p99",
    "history_claim_ratio",
    "limited_claim_ms_p50_10_per_s",
    "limited_claim_ms_p50_100000_per_d",
    "limited_claim_window_ratio",
    "machine",
    "settings",
)


class BenchError(RuntimeError):
    """The benchmark could not measure what it set out to (a worker failed, jobs were lost)."""


def new_queue_name() -> str:
    return QUEUE_PREFIX + secrets.token_hex(6)


@dataclass
class BenchOptions:
    jobs: int = 20_000
    processes: int = 2
    threads: int = 1
    batch_size: int | None = None  # None: PGQUEUE_BATCH_SIZE
    single_samples: int = 1000
    pickup_samples: int = 200
    pickup_pause: tuple[float, float] = (0.02, 0.05)
    history_rows: int = 1_000_000
    claim_jobs: int = 10_000
    claim_repeats: int = 5
    phases: Sequence[str] | None = None  # None: every phase of ``bench.PHASES``
    rounds: int = 3  # interleaved pairs of drains of the workflows phase (as ``--compare``'s)

    def resolved_batch_size(self) -> int:
        return self.batch_size if self.batch_size is not None else settings.BATCH_SIZE


@dataclass
class BenchResult:
    enqueue_bulk_per_s: float | None = None
    enqueue_single_ms_p50: float | None = None
    enqueue_single_ms_p99: float | None = None
    drain_per_s: float | None = None
    pickup_ms_p50: float | None = None
    pickup_ms_p99: float | None = None
    history_claim_ratio: float | None = None
    limited_claim_ms_p50_10_per_s: float | None = None
    limited_claim_ms_p50_100000_per_d: float | None = None
    limited_claim_window_ratio: float | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    #: Supporting figures for the human-readable table (not in the JSON object).
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {key: data[key] for key in RESULT_KEYS}


@dataclass
class MemoryResult:
    jobs: int
    rss_kib_first: int  # VmRSS once ``first_jobs`` were done
    first_jobs: int  # jobs done when that sample was taken (>= 10,000)
    rss_kib_end: int  # VmRSS after the last job
    hwm_kib_end: int  # VmHWM (peak RSS) after the last job
    seconds: float
    samples: list[tuple[int, int]]  # (jobs done, VmRSS KiB), about every 100,000 jobs
    machine: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DrainRun:
    """One drain of ``--compare``: ``jobs`` no-op jobs by one system, start to finish."""

    system: str
    jobs: int
    #: From the fork of the workers to the last job's finish (their start included).
    seconds_from_fork: float
    #: From the first job's start (its claim) to the last job's finish.
    seconds_from_first_start: float
    #: CPU of the worker processes (rusage of the reaped children), per job.
    worker_cpu_us_per_job: float
    #: CPU of their PostgreSQL backends (/proc), per job; None when the server is not local.
    postgres_cpu_us_per_job: float | None
    #: Checkpoints the server made meanwhile (any database's): after one, the first change of
    #: each page writes all of it to the WAL, which shows in the PostgreSQL CPU per job.
    checkpoints: int | None = None

    @classmethod
    def of_processes(
        cls,
        system: str,
        jobs: int,
        started_wall: float,
        first_start: datetime,
        last_finish: datetime,
        children: Sequence[ForkedProcess],
        postgres_cpu_seconds: float | None,
    ) -> DrainRun:
        """The figures of a drain by forked ``children``, reaped, forked at ``started_wall``."""
        postgres = postgres_cpu_seconds
        return cls(
            system=system,
            jobs=jobs,
            seconds_from_fork=last_finish.timestamp() - started_wall,
            seconds_from_first_start=last_finish.timestamp() - first_start.timestamp(),
            worker_cpu_us_per_job=sum(child.cpu_seconds for child in children) / jobs * 1e6,
            postgres_cpu_us_per_job=None if postgres is None else postgres / jobs * 1e6,
        )

    @property
    def per_s_from_fork(self) -> float:
        return self.jobs / self.seconds_from_fork

    @property
    def per_s_from_first_start(self) -> float:
        return self.jobs / self.seconds_from_first_start

    def figures(self) -> dict[str, float | None]:
        postgres = self.postgres_cpu_us_per_job
        return {
            "per_s_from_fork": round(self.per_s_from_fork, 1),
            "per_s_from_first_start": round(self.per_s_from_first_start, 1),
            "worker_cpu_us_per_job": round(self.worker_cpu_us_per_job, 1),
            "postgres_cpu_us_per_job": None if postgres is None else round(postgres, 1),
        }
