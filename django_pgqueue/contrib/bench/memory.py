"""``pgqueue_bench --memory``: one real worker's resident memory over many jobs."""

from __future__ import annotations

import time

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import machine_info
from django_pgqueue.contrib.bench.progress import NoProgress, Progress
from django_pgqueue.contrib.bench.results import BenchError, MemoryResult, new_queue_name
from django_pgqueue.contrib.bench.workers import WorkerProcess
from django_pgqueue.contrib.bench.workload import register as register_jobs


def run_memory(
    jobs: int = 1_000_000,
    first: int = 10_000,
    threads: int = 1,
    batch_size: int | None = None,
    progress: Progress | None = None,
    chunk: int = 20_000,
) -> MemoryResult:
    """One real worker runs ``jobs`` no-op jobs, fed in chunks; its VmRSS is read once
    ``first`` jobs are done and again after the last one."""
    progress = progress or NoProgress()
    first = min(first, jobs)
    queue = new_queue_name()
    mark = database.max_job_id()
    machine = machine_info()
    worker_id = f"{queue}:memory"
    handle = register_jobs().noop.using(queue=queue)
    child = WorkerProcess(
        queues=[queue], processes=1, threads=threads, batch_size=batch_size, worker_id=worker_id
    )
    enqueued = 0
    samples: list[tuple[int, int]] = []
    rss_first = first_done = 0
    next_sample = 0
    try:
        child.start()
        progress.start(f"one worker runs {jobs:,} jobs", jobs)
        started = time.perf_counter()
        while True:
            if child.poll() is not None:
                raise BenchError(f"The worker exited with status {child.exit_code}")
            active = database.count_active(queue)
            done = enqueued - active
            rss = child.rss_kib()
            if not rss_first and done >= first:
                rss_first, first_done = rss, done
            if done >= next_sample:
                samples.append((done, rss))
                next_sample += max(jobs // 10, 1)
            if done >= jobs:
                break
            if active < chunk and enqueued < jobs:
                size = min(chunk, jobs - enqueued)
                handle.enqueue_many([()] * size)
                enqueued += size
            progress.update(done)
            time.sleep(0.05 if not rss_first else 0.5)
        seconds = time.perf_counter() - started
        rss_end = child.rss_kib()
        hwm_end = child.rss_kib("VmHWM")
        samples.append((jobs, rss_end))
        progress.finish(f"VmRSS {rss_first:,} KiB after {first_done:,}, {rss_end:,} KiB at end")
    finally:
        child.stop()
        database.drop_broken_connection()
        database.delete_queue(queue, mark)
        database.delete_worker_rows(queue)
    return MemoryResult(
        jobs=jobs,
        rss_kib_first=rss_first,
        first_jobs=first_done,
        rss_kib_end=rss_end,
        hwm_kib_end=hwm_end,
        seconds=round(seconds, 1),
        samples=samples,
        machine=machine,
        settings={
            "queue": queue,
            "threads": threads,
            "batch_size": batch_size if batch_size is not None else settings.BATCH_SIZE,
            "flush_size": settings.FLUSH_SIZE,
            "retention": settings.RETENTION,
            "chunk": chunk,
        },
    )
