"""``--scenario async``: ``async def`` jobs on one worker process's event loop (issue 34,
docs/async.md). Each figure comes from the jobs' own rows (first start to last finish), so a
worker's start-up is not in it:

* ``sleep``: 500 jobs each awaiting 2 s, one process with 2 threads: seconds to run them all.
* ``noop``: 10,000 async no-ops, then 10,000 sync no-ops, one process (``--threads``): jobs a
  second each, and their ratio.
* ``mixed``: sync CPU jobs (5 ms each) alone, then the same with 2,000 async jobs awaiting 1 s
  at the same time in the same process: the sync jobs a second each time, and their ratio.
* ``query``: 1,000 async jobs each making a 5 ms query, through Django's one thread for sync
  code (what the async ORM and ``sync_to_async`` do), then ``thread_sensitive=False``.
* ``rss``: the worker process's resident heap (``RssAnon``) after 2,000 and after 20,000
  no-ops, async then sync (the same worker code around them), and how much its file pages
  (the journal's) grew meanwhile.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.db import connections

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.fleet import FleetOptions, FleetResult
from django_pgqueue.contrib.bench.progress import NoProgress, Progress
from django_pgqueue.contrib.bench.results import BenchError, new_queue_name
from django_pgqueue.contrib.bench.workers import WorkerProcess
from django_pgqueue.contrib.bench.workload import register as register_jobs
from django_pgqueue.states import JobStatus

SPAN = """
SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at))
FROM pgqueue_job WHERE id > %s AND queue = %s AND name = %s AND status = %s
"""


def _span(after_id: int, queue: str, name: str) -> tuple[int, float]:
    with connections[settings.DATABASE].cursor() as cursor:
        cursor.execute(SPAN, [after_id, queue, name, JobStatus.COMPLETED.value])
        count, seconds = cursor.fetchone()
    return int(count), float(seconds or 0.0)


def _burst(queue: str, threads: int, timeout: float = 600) -> WorkerProcess:
    child = WorkerProcess(queues=[queue], burst=True, processes=1, threads=threads)
    child.start()
    if child.wait(timeout) != 0:
        child.stop()
        raise BenchError(f"The worker of queue {queue} exited with status {child.exit_code}")
    return child


def worker_rss_kib(child: WorkerProcess, key: str = "RssAnon") -> int:
    """The resident memory of the worker process ``child`` supervises (``run_jobs`` forks it),
    in KiB (0 when unavailable): ``RssAnon`` by default, its heap, without the file pages it
    maps (the journal, an mmap of 32 MB whose pages become resident as it is written, 65 bytes
    a job, until it is compacted)."""
    try:
        children = Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text().split()
        status = Path(f"/proc/{children[0]}/status").read_text()
    except (OSError, IndexError):
        return 0
    for line in status.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _rss_over(
    handle: Any, threads: int, progress: Progress, jobs: int = 20_000, chunk: int = 2_000
) -> tuple[list[tuple[int, int]], int]:
    """One worker runs ``jobs`` of ``handle``, fed ``chunk`` at a time: its heap (KiB) each
    ``chunk`` jobs done, as (done, rss); and how much its file pages grew (KiB)."""
    queue = handle.spec.resolved_queue
    child = WorkerProcess(queues=[queue], processes=1, threads=threads)
    child.start()
    progress.start(f"{jobs:,} {handle.name}: worker RSS", jobs)
    done = enqueued = 0
    samples: list[tuple[int, int]] = []
    file_pages: list[int] = []
    try:
        deadline = time.monotonic() + 600
        while done < jobs and time.monotonic() < deadline:
            if child.poll() is not None:
                raise BenchError(f"The worker exited with status {child.exit_code}")
            active = database.count_active(queue)
            done = enqueued - active
            if done >= (len(samples) + 1) * chunk or (done >= jobs and samples):
                samples.append((done, worker_rss_kib(child)))
                file_pages.append(worker_rss_kib(child, "RssFile"))
            if active < chunk and enqueued < jobs:
                handle.enqueue_many([()] * chunk)
                enqueued += chunk
            progress.update(done)
            time.sleep(0.05)
    finally:
        child.stop()
    progress.finish(" ".join(f"{d}:{r}" for d, r in samples[-1:]))
    return samples, (file_pages[-1] - file_pages[0]) if file_pages else 0


def run_async(options: FleetOptions, progress: Progress | None = None) -> FleetResult:
    progress = progress or NoProgress()
    jobs = register_jobs()
    result = FleetResult("async", options)
    figures: dict[str, Any] = result.figures
    mark = database.max_job_id()
    queues: list[str] = []

    def queue() -> str:
        queues.append(new_queue_name())
        return queues[-1]

    try:
        # 500 jobs each awaiting 2 s, one process with 2 threads.
        q = queue()
        jobs.async_sleep.using(queue=q).enqueue_many([(2.0,)] * 500)
        progress.start("500 async jobs awaiting 2 s, 2 threads", 1)
        _burst(q, 2)
        count, seconds = _span(mark, q, jobs.async_sleep.name)
        figures["sleep_500x2s_jobs"] = count
        figures["sleep_500x2s_seconds"] = round(seconds, 2)
        progress.finish(f"{seconds:.2f} s")

        # 10,000 no-ops of each kind.
        rates = {}
        for kind, handle in (("async", jobs.async_noop), ("sync", jobs.noop)):
            q = queue()
            handle.using(queue=q).enqueue_many([()] * options.jobs)
            progress.start(f"{options.jobs:,} {kind} no-ops", 1)
            _burst(q, options.threads)
            count, seconds = _span(mark, q, handle.name)
            rates[kind] = count / seconds if seconds else 0.0
            figures[f"{kind}_noop_jobs_per_s"] = round(rates[kind])
            progress.finish(f"{rates[kind]:,.0f} jobs/s")
        figures["async_vs_sync_noop"] = round(rates["async"] / max(rates["sync"], 1e-9), 2)

        # Sync CPU jobs alone, then beside async jobs that wait.
        cpu_rates = {}
        for label, waiting in (("alone", 0), ("mixed", 2000)):
            q = queue()
            jobs.cpu.using(queue=q).enqueue_many([(5.0,)] * 1000)
            if waiting:
                jobs.async_sleep.using(queue=q).enqueue_many([(1.0,)] * waiting)
            progress.start(f"1,000 sync 5 ms CPU jobs, {waiting:,} async waiting", 1)
            _burst(q, 2)
            count, seconds = _span(mark, q, jobs.cpu.name)
            cpu_rates[label] = count / seconds if seconds else 0.0
            figures[f"cpu_{label}_jobs_per_s"] = round(cpu_rates[label])
            progress.finish(f"{cpu_rates[label]:,.0f} jobs/s")
        figures["cpu_mixed_vs_alone"] = round(cpu_rates["mixed"] / max(cpu_rates["alone"], 1e-9), 2)

        # Database-heavy async jobs: 1,000 jobs each making a 5 ms query, through Django's
        # one thread for sync code, then through the executor's threads.
        for label, one_thread in (("one_thread", True), ("executor", False)):
            q = queue()
            jobs.async_query.using(queue=q).enqueue_many([(5.0, one_thread)] * 1000)
            progress.start(f"1,000 async jobs with a 5 ms query ({label})", 1)
            _burst(q, 2)
            count, seconds = _span(mark, q, jobs.async_query.name)
            figures[f"query_5ms_{label}_jobs_per_s"] = round(count / seconds) if seconds else 0
            progress.finish(f"{figures[f'query_5ms_{label}_jobs_per_s']} jobs/s")

        # Resident memory over 20,000 no-ops of each kind (one worker each, fed in chunks).
        for kind, handle in (("async", jobs.async_noop), ("sync", jobs.noop)):
            samples, file_growth = _rss_over(handle.using(queue=queue()), options.threads, progress)
            figures[f"rss_file_kib_{kind}_growth"] = file_growth
            if samples:
                figures[f"rss_anon_kib_{kind}_after_2000"] = samples[0][1]
                figures[f"rss_anon_kib_{kind}_after_20000"] = samples[-1][1]
                figures[f"rss_anon_{kind}_samples"] = " ".join(f"{d}:{r}" for d, r in samples)
    finally:
        for q in queues:
            database.delete_queue(q, mark)
    return result
