"""``workflows``: what batches and chains cost (docs/workflows.md, issue 33).

* The same no-op jobs drained by ``run_jobs --burst``, plain and as the members of one batch
  (with an ``on_complete``), in ``--rounds`` pairs, the order swapped each round: the batch's
  drain over the plain one -> ``workflow_batch_drain_ratio`` (the median pair; every pair in
  ``workflow_batch_drain_ratios``). A shared machine moves a drain by a third from run to run:
  one pair says little.
* A chain of steps on an idle worker: from a step's end (its ``finished_at``) to the next
  step's first line -> ``workflow_chain_pickup_ms_p50/p99``.
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import TYPE_CHECKING

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import percentile
from django_pgqueue.contrib.bench.phases.pickup import wait_listening
from django_pgqueue.contrib.bench.results import BenchError
from django_pgqueue.states import FINISHED, JobStatus

if TYPE_CHECKING:
    from django_pgqueue.contrib.bench.context import BenchContext

#: Steps of the chain (fewer with fewer ``--jobs``).
CHAIN_STEPS = 1000


def workflows(bench: BenchContext) -> None:
    from django_pgqueue import batch, chain

    count = bench.options.jobs
    noop = bench.jobs.noop.using(queue=bench.queue)
    payloads = [()] * count

    rounds = bench.options.rounds

    def plain() -> float:
        noop.enqueue_many(payloads)
        return _drain(bench, "plain", count)

    def batched() -> float:
        with batch(on_complete=noop.s(), description="pgqueue_bench") as b:
            noop.enqueue_many(payloads)
        seconds = _drain(bench, "batch", count + 1)  # and its callback
        _delete_batch(b.pk)
        return seconds

    bench.progress.start(
        f"workflows: {rounds} pairs of {count:,} plain jobs and a batch of {count:,}", 2 * rounds
    )
    pairs = []
    for index in range(rounds):
        first, second = (plain, batched) if index % 2 == 0 else (batched, plain)
        one = first()
        bench.progress.update(1)
        other = second()
        bench.progress.update(1)
        pairs.append((one, other) if first is plain else (other, one))
    ratios = [b / p for p, b in pairs]
    result = bench.result
    result.details["workflow_plain_drain_s"] = round(statistics.median(p for p, _ in pairs), 4)
    result.details["workflow_batch_drain_s"] = round(statistics.median(b for _, b in pairs), 4)
    result.details["workflow_batch_drain_ratio"] = round(statistics.median(ratios), 3)
    result.details["workflow_batch_drain_ratios"] = [round(r, 3) for r in ratios]
    bench.progress.finish(f"batch / plain: {statistics.median(ratios):.3f} (median)")

    steps = min(CHAIN_STEPS, count)
    bench.progress.start(f"workflows: a chain of {steps:,} steps", steps)
    worker_id = f"{bench.queue}:chain"
    child = bench.start_worker(processes=1, threads=bench.options.threads, worker_id=worker_id)
    wait_listening(child, worker_id)
    record = bench.jobs.record_start.using(queue=bench.queue)
    jobs = chain(*(record.s() for _ in range(steps)))
    ids = [j.pk for j in jobs]
    _wait(bench, ids, timeout=60 + steps * 0.5, child=child)
    child.stop()
    from django_pgqueue.models import Job

    found = Job.objects.using(settings.DATABASE).filter(pk__in=ids)
    rows = {pk: (s, f) for pk, s, f in found.values_list("pk", "result", "finished_at")}
    latencies = []
    for before, this in itertools.pairwise(ids):
        started, finished = rows[this][0], rows[before][1]
        if started is None or finished is None:
            raise BenchError(f"Step #{this} or #{before} of the chain has no times")
        latencies.append((float(started) - finished.timestamp()) * 1000)
    result.details["workflow_chain_steps"] = steps
    result.details["workflow_chain_pickup_ms_p50"] = round(percentile(latencies, 50), 3)
    result.details["workflow_chain_pickup_ms_p99"] = round(percentile(latencies, 99), 3)
    bench.progress.finish(
        f"chain pickup p50 {result.details['workflow_chain_pickup_ms_p50']:.3f} ms"
    )
    database.delete_queue(bench.queue, bench.mark)


def _drain(bench: BenchContext, label: str, count: int) -> float:
    """Seconds from the fork of a ``--burst`` worker to the latest ``finished_at``."""
    started = time.time()
    child = bench.start_worker(
        processes=bench.options.processes,
        threads=bench.options.threads,
        batch_size=bench.options.resolved_batch_size(),
        burst=True,
        worker_id=f"{bench.queue}:{label}",
    )
    while child.poll() is None:
        time.sleep(0.01)
    if child.exit_code != 0:
        raise BenchError(f"run_jobs --burst exited with status {child.exit_code}")
    counts = database.status_counts(bench.queue, bench.mark)
    if counts.get(JobStatus.COMPLETED, 0) != count or len(counts) != 1:
        raise BenchError(f"The {label} drain left {counts}, not {count} completed")
    from django.db.models import Max

    from django_pgqueue.models import Job

    # The members' (or plain jobs') last end: a callback's run is a pickup, not the drain.
    drained = Job.objects.using(settings.DATABASE).filter(
        queue=bench.queue, pk__gt=bench.mark, callback_of__isnull=True
    )
    last = drained.aggregate(last=Max("finished_at"))["last"]
    if last is None:
        raise BenchError(f"The {label} drain left no finished job")
    seconds = float(last.timestamp()) - started
    database.delete_queue(bench.queue, bench.mark)
    return seconds


def _wait(bench: BenchContext, ids: list[int], *, timeout: float, child: object) -> None:
    from django_pgqueue.models import Job

    deadline = time.monotonic() + timeout
    jobs = Job.objects.using(settings.DATABASE).filter(pk__in=ids)
    while jobs.exclude(status__in=FINISHED).exists():
        if time.monotonic() > deadline:
            raise BenchError("The chain did not run to its end in time")
        time.sleep(0.05)
    if jobs.exclude(status=JobStatus.COMPLETED).exists():
        raise BenchError("A step of the chain did not complete")


def _delete_batch(batch_id: int) -> None:
    from django_pgqueue.models import Batch

    Batch.objects.using(settings.DATABASE).filter(pk=batch_id).delete()
