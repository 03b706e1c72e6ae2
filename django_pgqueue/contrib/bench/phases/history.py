"""``history``: the bare claim-and-complete loop with and without a large history."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import ClaimRun, claim_throughput

if TYPE_CHECKING:
    from django_pgqueue.contrib.bench.context import BenchContext


def history(bench: BenchContext) -> None:
    """-> ``history_claim_ratio``: throughput with ``history_rows`` finished rows in the table
    over the same without them."""
    options = bench.options
    progress = bench.progress
    progress.start("claim+complete, empty history", options.claim_repeats)
    database.delete_queue(bench.queue, bench.mark)
    empty = claim_rates(bench)
    progress.finish(describe_claims(empty))

    rows = options.history_rows
    progress.start(f"insert {rows:,} history rows", None)
    started = time.perf_counter()
    database.insert_history(bench.queue, rows)
    bench.result.details["history_insert_s"] = round(time.perf_counter() - started, 2)
    progress.finish(f"{time.perf_counter() - started:.1f} s")

    progress.start(f"claim+complete, {rows:,} history rows", options.claim_repeats)
    full = claim_rates(bench)
    progress.finish(describe_claims(full))

    # The best of the runs, as ``timeit`` does: on a shared machine a run only ever gets
    # slower than the code allows. Where the database runs on this machine, throughput per
    # CPU-second (client and backend) is compared: wall time swings with whatever else
    # runs, the work per job does not.
    wall_empty = max(r.per_s for r in empty)
    wall_full = max(r.per_s for r in full)
    cpu_empty = [r.cpu_per_s for r in empty if r.cpu_per_s is not None]
    cpu_full = [r.cpu_per_s for r in full if r.cpu_per_s is not None]
    details = bench.result.details
    details["claim_per_s_empty"] = round(wall_empty, 1)
    details["claim_per_s_history"] = round(wall_full, 1)
    details["claim_per_s_wall_ratio"] = round(wall_full / wall_empty, 3)
    if cpu_empty and cpu_full:
        details["claim_per_cpu_s_empty"] = round(max(cpu_empty), 1)
        details["claim_per_cpu_s_history"] = round(max(cpu_full), 1)
        bench.result.history_claim_ratio = round(max(cpu_full) / max(cpu_empty), 3)
        details["history_claim_ratio_basis"] = "jobs per CPU-second (client + backend)"
    else:
        bench.result.history_claim_ratio = details["claim_per_s_wall_ratio"]
        details["history_claim_ratio_basis"] = "jobs per second (wall clock)"

    progress.start(f"delete {rows:,} history rows", None)
    started = time.perf_counter()
    database.delete_queue(bench.queue, bench.mark)
    database.vacuum_analyze()
    progress.finish(f"{time.perf_counter() - started:.1f} s")


def claim_rates(bench: BenchContext) -> list[ClaimRun]:
    """``claim_repeats`` runs of :func:`claim_throughput` on ``claim_jobs`` fresh jobs."""
    rates = []
    for repeat in range(bench.options.claim_repeats):
        before = database.max_job_id()
        bench.noop.enqueue_many([()] * bench.options.claim_jobs)
        database.vacuum_analyze()
        rates.append(
            claim_throughput(
                bench.queue, f"{bench.queue}:claim", bench.options.resolved_batch_size()
            )
        )
        database.delete_queue(bench.queue, before)
        bench.progress.update(repeat + 1)
    return rates


def describe_claims(runs: Sequence[ClaimRun]) -> str:
    text = f"{max(r.per_s for r in runs):,.0f} jobs/s"
    cpu = [r.cpu_per_s for r in runs if r.cpu_per_s is not None]
    if cpu:
        text += f", {max(cpu):,.0f} jobs per CPU-second"
    return text + " (best)"
