"""The ranges of ``pgqueue_bench``'s and ``pgqueue_chaos``'s numeric options, besides the
worker's (:data:`django_pgqueue.rules.WORKER_OPTIONS`), in the rules' terms: argparse refuses
the rest (exit status 2) through :func:`django_pgqueue.management.options.of`."""

from __future__ import annotations

from django_pgqueue.rules import MAX_SECONDS, Integer, Number, Rule


def _seconds(*, above: bool = False) -> Number:
    return Number(0, MAX_SECONDS, low_inclusive=not above)


BENCH_OPTIONS: dict[str, Rule] = {
    "jobs": Integer(1, 10_000_000),
    "single_samples": Integer(1, 1_000_000),
    "pickup_samples": Integer(1, 100_000),
    "history_rows": Integer(1, 100_000_000),
    "claim_jobs": Integer(1, 10_000_000),
    "claim_repeats": Integer(1, 1_000),
    "memory_jobs": Integer(1, 100_000_000),
    # --scenario
    "minutes": Number(0, 10_080, seconds=False, low_inclusive=False, nullable=True),
    "rate": Number(0, 1_000_000, seconds=False, low_inclusive=False),
    "stress_rate": Number(0, 1_000_000, seconds=False, low_inclusive=False, nullable=True),
    "job_ms": Number(0, 3_600_000, seconds=False, low_inclusive=False),
    "warmup": _seconds(),
    "clean": _seconds(),
    "stress": _seconds(),
    "recovery": _seconds(),
    "drain_timeout": _seconds(),
    "sample_seconds": _seconds(above=True),
    "reader_transaction_seconds": _seconds(above=True),
    "reader_pause": _seconds(),
    "readers": Integer(1, 1_000),
    "producer_seconds": _seconds(above=True),
    # pgqueue_chaos
    "fault_interval": Number(0, 1_000_000, low_inclusive=False),
    "rounds": Integer(1, 100),
    "per_command": Integer(1, 1000),
}
