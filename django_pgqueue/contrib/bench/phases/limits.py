"""``limits``: the limited claim under a small rate window and under a large, half-full one.

Two scenarios, one after the other, each in a queue of its own named after the scratch queue,
with the same backlog of no-op jobs: a queue limited with ``rate_limit="10/s"`` (a window that
keeps each start's time), then one limited with ``rate_limit="100000/d"`` (a bucketed window,
a hundredth of a day per bucket) whose window is given :data:`RECENT_STARTS` starts over the
last ~23 hours, written straight into it: half full, it still lets jobs start. The figure is
the worker's own claim (``operations.claim`` on a worker connection, the limited one since the
queue has a limit) of :data:`CLAIM_LIMIT` jobs, timed call by call, its p50.

Like with like: every timed call claims the same number of jobs in both scenarios, so each
does the same work besides counting its window. The 10/s window is full after one call, so it
is emptied before each call (outside the timing); the large one keeps its 50,000 starts and
the ones the calls add. Each backlog is held out of the ring first, as the workers' upkeep
holds it (``sql.held``), then the job table and the ring are vacuumed, as autovacuum would
leave them; the claimed jobs are written back as completed, outside the timing. The scenarios
run apart, each queue alone in the ring: with both backlogs held at once, the claim's put-back
of the second queue's held rows stepped over the first queue's (a plan choice), which is not
what the window costs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django_pgqueue import limit_queue, operations
from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import percentile
from django_pgqueue.contrib.bench.results import BenchError
from django_pgqueue.operations import ready
from django_pgqueue.rules import parse_rate
from django_pgqueue.sql.limits import BUCKETS, queue_window
from django_pgqueue.states import JobStatus

if TYPE_CHECKING:
    from django_pgqueue.contrib.bench.context import BenchContext
    from django_pgqueue.worker.connection import QueueConnection

#: Each scenario's backlog, fewer if ``--jobs`` is smaller.
BACKLOG = 30_000
SMALL_RATE = "10/s"
LARGE_RATE = "100000/d"
#: The large window's recent starts: half its rate, so it still lets jobs start.
RECENT_STARTS = 50_000
#: Over how long the recent starts are spread (the newest buckets of the day's window).
RECENT_SPREAD_S = 23 * 3600
#: Jobs per claim (at most the small window's rate), timed calls per scenario, warm-up calls.
CLAIM_LIMIT = 10
CALLS = 200
WARMUP_CALLS = 5
#: A scenario's timed calls stop after this long, however many were made.
TIME_BUDGET_S = 30.0


@dataclass(frozen=True)
class Calls:
    """How many calls of how many jobs a scenario makes, from its backlog."""

    per_call: int
    warmup: int
    timed: int

    @classmethod
    def for_backlog(cls, size: int) -> Calls:
        per_call = min(CLAIM_LIMIT, max(1, size // 20))
        total = size // per_call
        warmup = min(WARMUP_CALLS, total // 4)
        return cls(per_call, warmup, min(CALLS, total - warmup))


def limits(bench: BenchContext) -> None:
    """-> ``limited_claim_ms_p50_10_per_s``, ``limited_claim_ms_p50_100000_per_d`` and their
    ratio ``limited_claim_window_ratio`` (large over small)."""
    size = min(BACKLOG, bench.options.jobs)
    calls = Calls.for_backlog(size)
    small = scenario(bench, f"{bench.queue}-limits-10-per-s", SMALL_RATE, 0, size, calls)
    large = scenario(
        bench, f"{bench.queue}-limits-100000-per-d", LARGE_RATE, RECENT_STARTS, size, calls
    )
    small_ms, large_ms = percentile(small, 50), percentile(large, 50)
    result = bench.result
    result.limited_claim_ms_p50_10_per_s = round(small_ms, 3)
    result.limited_claim_ms_p50_100000_per_d = round(large_ms, 3)
    result.limited_claim_window_ratio = round(large_ms / small_ms, 3)
    details = result.details
    details["limited_claim_ms_p99_10_per_s"] = round(percentile(small, 99), 3)
    details["limited_claim_ms_p99_100000_per_d"] = round(percentile(large, 99), 3)
    details["limited_claim_calls"] = (
        f"{len(small)} and {len(large)}, {calls.per_call} jobs each, backlog {size:,}"
    )


def scenario(
    bench: BenchContext, queue: str, rate: str, recent: int, size: int, calls: Calls
) -> list[float]:
    """The milliseconds of each timed limited claim in ``queue``, limited to ``rate`` with
    ``recent`` starts in its window (0: its window is emptied before each call). The queue's
    jobs, its settings and its window are gone afterwards."""
    from django_pgqueue.worker.claims import CLAIM_PATH_MAX_AGE
    from django_pgqueue.worker.connection import QueueConnection

    progress = bench.progress
    window = queue_window(queue)
    worker_id = f"{bench.queue}:limits"
    connection = QueueConnection(settings.DATABASE, f"pgqueue bench {worker_id}")
    try:
        progress.start(f"{rate}: {size:,} jobs held, {recent:,} recent starts", None)
        started = time.perf_counter()
        limit_queue(queue, rate_limit=rate)
        bench.jobs.noop.using(queue=queue).enqueue_many([()] * size)
        if recent:
            _, period = parse_rate(rate)
            database.fill_window(window, recent, int(RECENT_SPREAD_S // (period / BUCKETS)))
        hold_backlog(connection, queue, size)
        database.vacuum_analyze()
        database.vacuum_analyze_ready()
        progress.finish(f"{time.perf_counter() - started:.1f} s")

        progress.start(f"{rate}: limited claim of {calls.per_call} x {calls.timed}", calls.timed)
        timings: list[float] = []
        path = operations.ClaimPath(max_age=CLAIM_PATH_MAX_AGE)
        deadline = time.monotonic() + TIME_BUDGET_S
        for call in range(calls.warmup + calls.timed):
            if not recent:
                database.empty_window(window)
            seconds = timed_claim(connection, path, worker_id, queue, calls.per_call)
            if call < calls.warmup:
                continue
            timings.append(seconds * 1000)
            progress.update(len(timings))
            if time.monotonic() > deadline:
                break
        entries, counted = database.window_starts(window)
        progress.finish(
            f"p50 {percentile(timings, 50):.3f} ms; the window counts {counted:,} starts in "
            f"{entries} entries"
        )
        bench.result.details[f"limited_claim_window_{rate.replace('/', '_per_')}"] = (
            f"{counted:,} starts counted in {entries} entries"
        )
        return timings
    finally:
        connection.close()
        database.delete_queue(queue, bench.mark)
        limit_queue(queue)  # no limits: its row and its window go
        database.vacuum_analyze()
        database.vacuum_analyze_ready()


def hold_backlog(connection: QueueConnection, queue: str, size: int) -> None:
    """Hold the queue's backlog out of the ring as the workers' upkeep would, a batch per
    sweep, until a sweep holds no more."""
    held = -1
    for _ in range(size // ready.PROMOTE_BATCH + 3):
        ready.sweep_held(connection)
        now = database.held_rows(queue)
        if now == held:
            return
        held = now


def timed_claim(
    connection: QueueConnection,
    path: operations.ClaimPath,
    worker_id: str,
    queue: str,
    limit: int,
) -> float:
    """Seconds of one limited claim of ``limit`` jobs of ``queue``, which must take them all
    (``path``: the claimer's reading of the claim needed, kept as a worker keeps it); they are
    then written back as completed (not timed)."""
    started = time.perf_counter()
    request = operations.ClaimRequest(
        worker_id=worker_id,
        limit=limit,
        queues=[queue],
        visibility_timeout=settings.VISIBILITY_TIMEOUT,
        reclaim=False,
    )
    jobs, _ = operations.claim(connection, request, path=path)
    seconds = time.perf_counter() - started
    if len(jobs) != limit:
        raise BenchError(f"A limited claim of {queue} took {len(jobs)} jobs, not {limit}")
    now = datetime.now(UTC)
    operations.finish(
        connection,
        worker_id,
        [
            operations.Outcome(
                job.pk,
                JobStatus.COMPLETED,
                now,
                now,
                result_json="null",
                claim_token=job.claim_token,
            )
            for job in jobs
        ],
        delete_completed=False,
    )
    return seconds
