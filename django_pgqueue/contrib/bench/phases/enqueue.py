"""``enqueue``: bulk ``enqueue_many``; ``single``: one ``enqueue()`` per transaction."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import percentile
from django_pgqueue.contrib.bench.results import BenchError

if TYPE_CHECKING:
    from django_pgqueue.contrib.bench.context import BenchContext


def enqueue_bulk(bench: BenchContext) -> None:
    """-> ``enqueue_bulk_per_s``; leaves the jobs for ``drain``."""
    count = bench.options.jobs
    bench.progress.start(f"enqueue_many {count:,} jobs", count)
    started = time.perf_counter()
    ids = bench.noop.enqueue_many([()] * count)
    seconds = time.perf_counter() - started
    if len(ids) != count:
        raise BenchError(f"enqueue_many returned {len(ids)} ids for {count} jobs")
    bench.result.enqueue_bulk_per_s = round(count / seconds, 1)
    bench.result.details["enqueue_bulk_s"] = round(seconds, 4)
    bench.progress.finish(f"{bench.result.enqueue_bulk_per_s:,.0f} jobs/s")


def enqueue_single(bench: BenchContext) -> None:
    """-> ``enqueue_single_ms_p50/p99``."""
    count = bench.options.single_samples
    bench.progress.start(f"enqueue() x {count:,}", count)
    handle = bench.noop
    handle.enqueue()  # connect and warm up outside the sample
    timings: list[float] = []
    for index in range(count):
        started = time.perf_counter()
        handle.enqueue()
        timings.append((time.perf_counter() - started) * 1000)
        if bench.progress.live and index % 50 == 0:
            bench.progress.update(index)
    bench.result.enqueue_single_ms_p50 = round(percentile(timings, 50), 3)
    bench.result.enqueue_single_ms_p99 = round(percentile(timings, 99), 3)
    bench.progress.finish(
        f"p50 {bench.result.enqueue_single_ms_p50:.3f} ms, "
        f"p99 {bench.result.enqueue_single_ms_p99:.3f} ms"
    )
    database.delete_queue(bench.queue, bench.mark)
