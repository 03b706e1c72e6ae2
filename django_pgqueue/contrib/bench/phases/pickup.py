"""``pickup``: from an enqueue's commit to the job function's first line, on an idle worker."""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import percentile
from django_pgqueue.contrib.bench.results import BenchError
from django_pgqueue.contrib.bench.workers import WorkerProcess
from django_pgqueue.states import JobStatus

if TYPE_CHECKING:
    from django_pgqueue.contrib.bench.context import BenchContext


def pickup(bench: BenchContext) -> None:
    """-> ``pickup_ms_p50/p99``: one job enqueued at a time, with pauses."""
    from django_pgqueue.models import Job

    count = bench.options.pickup_samples
    bench.progress.start(f"pickup x {count:,}", count)
    worker_id = f"{bench.queue}:pickup"
    child = bench.start_worker(processes=1, threads=bench.options.threads, worker_id=worker_id)
    wait_listening(child, worker_id)
    handle = bench.jobs.record_start.using(queue=bench.queue)
    # Warm-up: the first jobs pay for imports and connections in the worker.
    for _ in range(5):
        wait_done([handle.enqueue().pk], child)
    committed: dict[int, float] = {}
    low, high = bench.options.pickup_pause
    for index in range(count):
        time.sleep(random.uniform(low, high))
        job_id = handle.enqueue().pk  # autocommit: returns once the INSERT committed
        committed[job_id] = time.time()
        if bench.progress.live and index % 10 == 0:
            bench.progress.update(index)
    wait_done(list(committed), child)
    child.stop()
    rows = Job.objects.using(settings.DATABASE).filter(pk__in=list(committed))
    latencies = [
        (float(started) - committed[pk]) * 1000
        for pk, started in rows.values_list("pk", "result")
        if started is not None
    ]
    if len(latencies) != count:
        raise BenchError(f"{count - len(latencies)} pickup jobs did not run")
    result = bench.result
    result.pickup_ms_p50 = round(percentile(latencies, 50), 3)
    result.pickup_ms_p99 = round(percentile(latencies, 99), 3)
    result.details["pickup_ms_max"] = round(max(latencies), 3)
    bench.progress.finish(f"p50 {result.pickup_ms_p50:.3f} ms, p99 {result.pickup_ms_p99:.3f} ms")
    database.delete_queue(bench.queue, bench.mark)


def wait_listening(child: WorkerProcess, worker_id: str, timeout: float = 30) -> None:
    """Until the worker's listener connection has run LISTEN."""
    if not settings.LISTEN:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise BenchError(f"The pickup worker exited with status {child.exit_code}")
        if database.listening(worker_id):
            return
        time.sleep(0.02)
    raise BenchError("The pickup worker did not start listening")


def wait_done(job_ids: list[int], child: WorkerProcess, timeout: float = 60) -> None:
    from django_pgqueue.models import Job

    deadline = time.monotonic() + timeout
    jobs = Job.objects.using(settings.DATABASE).filter(pk__in=job_ids)
    while jobs.exclude(status=JobStatus.COMPLETED).exists():
        if child.poll() is not None:
            raise BenchError(f"The pickup worker exited with status {child.exit_code}")
        if time.monotonic() > deadline:
            raise BenchError("Pickup jobs were not run in time")
        time.sleep(0.01)
