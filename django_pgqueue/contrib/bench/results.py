"""What a benchmark run is asked to do and what it found."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from django_pgqueue.conf import settings

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
