"""``--scenario herd`` and ``--scenario producers``: many workers, many producers (issue 35,
docs/scaling.md).

* ``herd``: ``--processes`` N idle worker processes (``--threads`` each): N ``run_jobs``
  commands, or N/P ``run_jobs --processes P`` with ``--per-command P`` (one listening connection
  each, its relay), then a trickle of ``--pickup-samples`` jobs at ``--rate`` a second.
  Pickup (commit to the job's first line) p50/p95, claims per job (``pg_stat_statements``, when
  the server has it), the workers' connections, PostgreSQL CPU per job over the trickle and per
  idle worker before it. Then the drain: ``--jobs`` no-op jobs committed at once, run by the
  whole fleet (jobs a second from the commit to the last finish, claims and PostgreSQL CPU per
  job).
* ``producers``: ``--processes`` P processes each committing one-job transactions
  (``transaction.atomic(): enqueue()``) for ``--producer-seconds``, in ``--rounds`` interleaved
  rounds: with the notification after commit (the default), with none (``PGQUEUE_NOTIFY =
  False``), and inside the transaction (``"in_transaction"``: what the lock on notifying commits
  costs). Enqueues a second of each, and the ratio of the first two. One idle listening worker
  is registered (a row and a connection on its channel, nothing more): notifications go out as
  they would to a fleet at rest, and no worker's CPU is in the figure.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import BackendCPU, percentile
from django_pgqueue.contrib.bench.progress import NoProgress, Progress
from django_pgqueue.contrib.bench.results import BenchError, new_queue_name
from django_pgqueue.contrib.bench.workers import WorkerProcess
from django_pgqueue.contrib.bench.workload import register as register_jobs
from django_pgqueue.pools import close_pools
from django_pgqueue.sql.rota import LISTENER_TAG_LENGTH, listener_name
from django_pgqueue.states import JobStatus
from django_pgqueue.worker.relay import relay_id
from django_pgqueue.worker.rota import REFRESH

FLEET_SCENARIOS = ("herd", "producers", "async")

#: Claim statements in ``pg_stat_statements``: every claim sets a claim token (its text there
#: has the sequence's name replaced by a parameter).
CLAIM_CALLS = """
SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query LIKE '%claim_token = (SELECT nextval(%'
"""
#: The workers' connections to this database.
CONNECTIONS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND left(application_name, %s) = %s
"""
#: The listening connections of the workers whose tags (``sql.rota.listener_name``) are given.
LISTENERS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND left(application_name, %s) = ANY(%s::text[])
"""


@dataclass
class FleetOptions:
    scenario: str = "herd"
    processes: int = 40
    threads: int = 1
    rate: float = 10.0
    jobs: int = 200
    seconds: float = 10.0
    rounds: int = 3
    per_command: int = 1
    drain_jobs: int = 0


@dataclass
class FleetResult:
    scenario: str
    options: FleetOptions
    figures: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
        head = f"scenario {self.scenario}: " + ", ".join(
            f"{k}={v}" for k, v in self.options.__dict__.items() if k != "scenario"
        )
        return [head, *(f"{name:<40} {value}" for name, value in self.figures.items())]


def claim_calls() -> int | None:
    """Claim statements run so far on this database (None: no ``pg_stat_statements``)."""
    try:
        with (
            connections[settings.DATABASE].cursor() as cursor,
            transaction.atomic(using=settings.DATABASE),
        ):
            cursor.execute(CLAIM_CALLS)
            return int(cursor.fetchone()[0])
    except Exception:
        return None


def _count(query: str, params: list[Any]) -> int:
    with connections[settings.DATABASE].cursor() as cursor:
        cursor.execute(query, params)
        return int(cursor.fetchone()[0])


def _drain(queue: str, count: int, figures: dict[str, Any], backends: BackendCPU) -> None:
    """``count`` no-op jobs committed at once, drained by the idle fleet."""
    handle = register_jobs().noop.using(queue=queue)
    mark = database.max_job_id()
    claims_before = claim_calls()
    backends.sample(lookup=False)
    cpu_before = backends.total
    with transaction.atomic(using=settings.DATABASE):
        for start in range(0, count, 5000):
            handle.enqueue_many([()] * min(5000, count - start))
    committed = time.time()
    deadline = time.monotonic() + 60 + count / 100
    while database.count_active(queue):
        if time.monotonic() > deadline:
            raise BenchError("The drain's jobs were not all run")
        time.sleep(0.05)
        backends.sample(lookup=False)
    backends.sample(lookup=False)
    counts = database.status_counts(queue, mark)
    if counts.get(JobStatus.COMPLETED, 0) != count or len(counts) != 1:
        raise BenchError(f"The drain left the queue as {counts}, not {count} completed")
    seconds = database.last_finished_at(queue, mark).timestamp() - committed
    figures["drain_per_s"] = round(count / seconds)
    claims_after = claim_calls()
    if claims_before is not None and claims_after is not None:
        figures["drain_claims_per_job"] = round((claims_after - claims_before) / count, 3)
    if cpu_before is not None and backends.total is not None:
        us = (backends.total - cpu_before) / count * 1e6
        figures["drain_postgres_cpu_us_per_job"] = round(us)


def _all_listening(queue: str, processes: int) -> bool:
    """Every worker process of the herd marked listening (by its own listener or its relay)."""
    from django_pgqueue.models import Worker

    rows = Worker.objects.using(settings.DATABASE).filter(
        worker_id__startswith=f"{queue}:herd:", stopped_at__isnull=True, listening=True
    )
    return rows.count() >= processes


def run_herd(options: FleetOptions, progress: Progress | None = None) -> FleetResult:
    from django_pgqueue.models import Job

    progress = progress or NoProgress()
    queue = new_queue_name()
    handle = register_jobs().record_start.using(queue=queue)
    result = FleetResult("herd", options)
    figures = result.figures
    per = options.per_command
    if options.processes % per:
        raise BenchError(f"--processes {options.processes} is no multiple of --per-command {per}")
    ids = [f"{queue}:herd:{n}" for n in range(options.processes // per)]
    children = [
        WorkerProcess(queues=[queue], threads=options.threads, worker_id=worker_id, processes=per)
        for worker_id in ids
    ]
    # Each command's listening connection: its relay's (several processes), else its worker's.
    tags = [listener_name(relay_id(i) if per > 1 else i)[:LISTENER_TAG_LENGTH] for i in ids]

    def listeners() -> int:
        return _count(LISTENERS, [LISTENER_TAG_LENGTH, tags])

    try:
        progress.start(f"starting {options.processes} workers", options.processes)
        for child in children:
            child.start()
        deadline = time.monotonic() + 60 + options.processes
        while listeners() < len(ids) or not _all_listening(queue, options.processes):
            if time.monotonic() > deadline or any(c.poll() is not None for c in children):
                raise BenchError("The herd's workers did not all start listening")
            time.sleep(0.1)
        time.sleep(REFRESH + 1.0)  # every worker's rota has read the others
        workers = f"pgqueue worker {queue}:herd"
        figures["connections"] = _count(CONNECTIONS, [len(workers), workers]) + listeners()
        progress.finish(f"{figures['connections']} connections")
        # Idle: what the workers cost PostgreSQL when there is nothing to do.
        backends = BackendCPU("pgqueue ")
        backends.sample()
        before = backends.total
        idle_seconds = 5.0
        time.sleep(idle_seconds)
        backends.sample()
        if before is not None and backends.total is not None:
            per_worker = (backends.total - before) / idle_seconds / options.processes
            figures["idle_postgres_cpu_per_worker_pct"] = round(per_worker * 100, 3)
        # The trickle.
        claims_before = claim_calls()
        cpu_before = backends.total
        committed: dict[int, float] = {}
        progress.start(f"trickle of {options.jobs} jobs at {options.rate:g}/s", options.jobs)
        start = time.monotonic()
        for index in range(options.jobs):
            time.sleep(max(0.0, start + index / options.rate - time.monotonic()))
            job_id = handle.enqueue().pk
            committed[job_id] = time.time()
            backends.sample(lookup=False)
            if progress.live and index % 10 == 0:
                progress.update(index)
        jobs = Job.objects.using(settings.DATABASE).filter(pk__in=list(committed))
        deadline = time.monotonic() + 60
        while jobs.exclude(status=JobStatus.COMPLETED).exists():
            if time.monotonic() > deadline:
                raise BenchError("The trickle's jobs were not all run")
            time.sleep(0.05)
        backends.sample(lookup=False)
        claims_after = claim_calls()
        latencies = [
            (float(started) - committed[pk]) * 1000
            for pk, started in jobs.values_list("pk", "result")
            if started is not None
        ]
        figures["pickup_ms_p50"] = round(percentile(latencies, 50), 3)
        figures["pickup_ms_p95"] = round(percentile(latencies, 95), 3)
        if claims_before is not None and claims_after is not None:
            figures["claims_per_job"] = round((claims_after - claims_before) / options.jobs, 2)
        if cpu_before is not None and backends.total is not None:
            us = (backends.total - cpu_before) / options.jobs * 1e6
            figures["postgres_cpu_us_per_job"] = round(us)
        figures["workers_that_ran_jobs"] = len(set(jobs.values_list("locked_by", flat=True)))
        progress.finish(f"pickup p50 {figures['pickup_ms_p50']} ms")
        if options.drain_jobs:
            progress.start(f"drain of {options.drain_jobs:,} jobs", options.drain_jobs)
            _drain(queue, options.drain_jobs, figures, backends)
            progress.finish(f"{figures['drain_per_s']:,.0f} jobs/s")
    finally:
        for child in children:  # all at once: stop() waits for each in turn
            if child.pid is not None and child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)
        for child in children:
            child.stop()
        database.drop_broken_connection()
        database.delete_queue(queue, 0)
        database.delete_worker_rows(queue)
    return result


def _produce(queue: str, mode: str, seconds: float, out: Any) -> None:
    """In a forked producer: one-job transactions for ``seconds``; puts how many committed."""
    from django.conf import settings as django_settings

    handle = register_jobs().noop.using(queue=queue)
    alias = settings.DATABASE
    django_settings.PGQUEUE_NOTIFY = {"after commit": True, "off": False}.get(
        mode, "in_transaction"
    )
    done = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with transaction.atomic(using=alias):
            handle.enqueue()
        done += 1
    connections.close_all()
    out.put(done)


def run_producers(options: FleetOptions, progress: Progress | None = None) -> FleetResult:
    progress = progress or NoProgress()
    queue = new_queue_name()
    register_jobs()
    result = FleetResult("producers", options)
    modes = ("after commit", "off", "in transaction")
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    context = multiprocessing.get_context("fork")
    # An idle worker of the queue, as enqueue() sees one: a row marked listening, and its
    # connection on its own channel (no worker runs: the producers' figure is theirs alone).
    from django_pgqueue import operations
    from django_pgqueue.sql.rota import channel
    from django_pgqueue.worker.connection import QueueConnection

    listener_id = f"{queue}:listener"
    listener = QueueConnection(settings.DATABASE, listener_name(listener_id))
    operations.report_worker(
        operations.DjangoDatabase(settings.DATABASE), listener_id, [queue], 1, 0, listening=True
    )
    operations.listen(listener, [], own=channel(listener_id))
    try:
        for round_ in range(options.rounds):
            for mode in modes:
                progress.start(f"round {round_ + 1}: {mode}", 1)
                close_pools()  # never share a connection (or a pool) across fork
                out = context.Queue()
                procs = [
                    context.Process(target=_produce, args=(queue, mode, options.seconds, out))
                    for _ in range(options.processes)
                ]
                for proc in procs:
                    proc.start()
                total = sum(out.get(timeout=options.seconds + 120) for _ in procs)
                for proc in procs:
                    proc.join(timeout=30)
                rates[mode].append(total / options.seconds)
                progress.finish(f"{total / options.seconds:,.0f} enqueues/s")
                database.delete_queue(queue, 0)
    finally:
        listener.close()
        database.drop_broken_connection()
        database.delete_queue(queue, 0)
        database.delete_worker_rows(queue)
    medians = {mode: percentile(values, 50) for mode, values in rates.items()}
    for mode in modes:
        result.figures[f"enqueues_per_s_notify_{mode.replace(' ', '_')}"] = round(medians[mode])
    result.figures["after_commit_vs_off"] = round(medians["after commit"] / medians["off"], 3)
    result.figures["rounds"] = {mode: [round(v) for v in values] for mode, values in rates.items()}
    return result
