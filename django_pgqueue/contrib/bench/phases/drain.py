"""``drain``: the enqueued jobs, drained by ``run_jobs --burst --processes P``."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import BackendCPU
from django_pgqueue.contrib.bench.results import BenchError
from django_pgqueue.states import JobStatus

if TYPE_CHECKING:
    from django_pgqueue.contrib.bench.context import BenchContext


def drain(bench: BenchContext) -> None:
    """-> ``drain_per_s``, from the fork to the latest ``finished_at``, and the CPU per job."""
    options = bench.options
    count = options.jobs
    bench.progress.start(f"drain with {options.processes} processes", count)
    worker_id = f"{bench.queue}:drain"
    backends = BackendCPU(f"pgqueue worker {worker_id}")
    started_wall = time.time()
    started = time.perf_counter()
    child = bench.start_worker(
        processes=options.processes,
        threads=options.threads,
        batch_size=options.resolved_batch_size(),
        burst=True,
        worker_id=worker_id,
    )
    next_update = started
    while child.poll() is None:
        time.sleep(0.01)
        backends.sample(lookup=len(backends.seconds) < options.processes)
        if bench.progress.live and time.perf_counter() >= next_update:
            next_update = time.perf_counter() + 0.25
            bench.progress.update(count - database.count_active(bench.queue))
    exited = time.perf_counter() - started
    if child.exit_code != 0:
        raise BenchError(f"run_jobs --burst exited with status {child.exit_code}")
    counts = database.status_counts(bench.queue, bench.mark)
    if counts.get(JobStatus.COMPLETED, 0) != count or len(counts) != 1:
        raise BenchError(f"Drain left the scratch queue as {counts}, not {count} completed")
    last = database.last_finished_at(bench.queue, bench.mark)
    seconds = last.timestamp() - started_wall
    result = bench.result
    result.drain_per_s = round(count / seconds, 1)
    result.details["drain_s"] = round(seconds, 4)
    result.details["drain_until_exit_s"] = round(exited, 4)
    # The same drain without the workers' start: from the first claim to the last finish.
    first = database.first_started_at(bench.queue, bench.mark)
    result.details["drain_from_first_start_s"] = round(last.timestamp() - first.timestamp(), 4)
    # Where the time goes, independent of what else runs on the machine: CPU per job in
    # the worker processes and in their database backends, and the rate those would allow
    # if they had every CPU of this machine to themselves.
    worker_us = child.cpu_seconds / count * 1e6
    result.details["drain_worker_cpu_us_per_job"] = round(worker_us, 1)
    if backends.total is not None:
        postgres_us = backends.total / count * 1e6
        result.details["drain_postgres_cpu_us_per_job"] = round(postgres_us, 1)
        result.details["drain_cpu_bound_ceiling_per_s"] = round(
            (os.cpu_count() or 1) / (worker_us + postgres_us) * 1e6
        )
    bench.progress.finish(f"{result.drain_per_s:,.0f} jobs/s")
    database.delete_queue(bench.queue, bench.mark)
