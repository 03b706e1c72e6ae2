"""``manage.py pgqueue_bench``: reproducible throughput and latency figures for this queue.

Everything happens in a scratch queue named ``pgqueue-bench-<random>`` that no real worker
serves, and every row the benchmark made (jobs and worker rows) is deleted at the end, on
Ctrl-C too. The workers are the real ones: ``run_jobs`` runs in a forked child process, which
inherits the two no-op jobs registered below.

Phases (each can be left out with ``phases``):

* ``enqueue``: ``enqueue_many`` of ``jobs`` no-op jobs -> ``enqueue_bulk_per_s``.
* ``drain``: those jobs, drained by ``run_jobs --burst --processes P`` ->  ``drain_per_s``,
  from the fork to the latest ``finished_at``.
* ``single``: ``enqueue()`` one job per transaction -> ``enqueue_single_ms_p50/p99``.
* ``pickup``: an idle ``run_jobs`` worker (LISTEN/NOTIFY on), one job enqueued at a time with
  pauses; from the enqueue's commit to the job function's first line -> ``pickup_ms_p50/p99``.
* ``history``: claim-and-complete throughput with ``history_rows`` completed/dead rows in the
  table over the same without them -> ``history_claim_ratio``.

``run_memory`` is a separate, longer measurement: one worker runs a million no-op jobs while
its resident memory is sampled.
"""

from __future__ import annotations

import contextlib
import os
import platform
import secrets
import signal
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import django
import psycopg
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from django_pgqueue import job, sql
from django_pgqueue.conf import settings

QUEUE_PREFIX = "pgqueue-bench-"
PHASES = ("enqueue", "drain", "single", "pickup", "history")
#: The keys of the JSON object ``pgqueue_bench --json`` prints, in order.
RESULT_KEYS = (
    "enqueue_bulk_per_s",
    "enqueue_single_ms_p50",
    "enqueue_single_ms_p99",
    "drain_per_s",
    "pickup_ms_p50",
    "pickup_ms_p99",
    "history_claim_ratio",
    "machine",
    "settings",
)


@job(name="django_pgqueue.bench.noop", max_attempts=1)
def noop() -> None:
    """The job every throughput figure runs: does nothing, returns nothing."""
    return None


@job(name="django_pgqueue.bench.record_start", max_attempts=1)
def record_start() -> float:
    """Returns the wall clock at the first line of the job function (the pickup phase)."""
    return time.time()


class BenchError(RuntimeError):
    """The benchmark could not measure what it set out to (a worker failed, jobs were lost)."""


# ----- progress --------------------------------------------------------------------------------


class Progress(Protocol):
    """How a phase reports itself; ``live`` asks for ``update`` calls (costs a query each)."""

    live: bool

    def start(self, phase: str, total: int | None = None) -> None: ...

    def update(self, done: int) -> None: ...

    def finish(self, summary: str) -> None: ...


class NoProgress:
    live = False

    def start(self, phase: str, total: int | None = None) -> None:
        pass

    def update(self, done: int) -> None:
        pass

    def finish(self, summary: str) -> None:
        pass


# ----- options and results ---------------------------------------------------------------------


@dataclass
class BenchOptions:
    jobs: int = 20_000
    processes: int = 2
    threads: int = 1
    batch_size: int | None = None  # None: PGQUEUE_BATCH_SIZE
    single_samples: int = 1000
    pickup_samples: int = 200
    pickup_pause: tuple[float, float] = (0.02, 0.05)
    history_rows: int = 1_000_000
    claim_jobs: int = 10_000
    claim_repeats: int = 5
    phases: Sequence[str] = PHASES

    def resolved_batch_size(self) -> int:
        return self.batch_size if self.batch_size is not None else settings.BATCH_SIZE


@dataclass
class BenchResult:
    enqueue_bulk_per_s: float | None = None
    enqueue_single_ms_p50: float | None = None
    enqueue_single_ms_p99: float | None = None
    drain_per_s: float | None = None
    pickup_ms_p50: float | None = None
    pickup_ms_p99: float | None = None
    history_claim_ratio: float | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    #: Supporting figures for the human-readable table (not in the JSON object).
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {key: data[key] for key in RESULT_KEYS}


@dataclass
class MemoryResult:
    jobs: int
    rss_kib_first: int  # VmRSS once ``first_jobs`` were done
    first_jobs: int  # jobs done when that sample was taken (>= 10,000)
    rss_kib_end: int  # VmRSS after the last job
    hwm_kib_end: int  # VmHWM (peak RSS) after the last job
    seconds: float
    samples: list[tuple[int, int]]  # (jobs done, VmRSS KiB), about every 100,000 jobs
    machine: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)


# ----- helpers ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (``pct`` in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of an empty sample")
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def new_queue_name() -> str:
    return QUEUE_PREFIX + secrets.token_hex(6)


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu_model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    with _cursor() as cursor:
        cursor.execute("SHOW server_version")
        server_version = cursor.fetchone()[0]
        cursor.execute("SHOW synchronous_commit")
        synchronous_commit = cursor.fetchone()[0]
        cursor.execute("SHOW shared_buffers")
        shared_buffers = cursor.fetchone()[0]
        cursor.execute("SHOW autovacuum")
        autovacuum = cursor.fetchone()[0]
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "load_average_1m": round(load[0], 2),
        "platform": platform.platform(),
        "postgresql": server_version,
        "postgresql_synchronous_commit": synchronous_commit,
        "postgresql_shared_buffers": shared_buffers,
        "postgresql_autovacuum": autovacuum,
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "psycopg_impl": psycopg.pq.__impl__,
    }


def queue_settings(options: BenchOptions, queue: str) -> dict[str, Any]:
    return {
        "queue": queue,
        "jobs": options.jobs,
        "processes": options.processes,
        "threads": options.threads,
        "batch_size": options.resolved_batch_size(),
        "flush_size": settings.FLUSH_SIZE,
        "flush_interval": settings.FLUSH_INTERVAL,
        "listen": settings.LISTEN,
        "poll_interval": settings.POLL_INTERVAL,
        "single_samples": options.single_samples,
        "pickup_samples": options.pickup_samples,
        "history_rows": options.history_rows,
        "claim_jobs": options.claim_jobs,
        "phases": list(options.phases),
    }


@contextlib.contextmanager
def _cursor() -> Iterator[Any]:
    with connections[settings.DATABASE].cursor() as cursor:
        yield cursor


def _execute(query: str, params: Sequence[Any] | None = None) -> int:
    with _cursor() as cursor:
        cursor.execute(query, params)
        return int(cursor.rowcount)


def _fetchone(query: str, params: Sequence[Any] | None = None) -> Any:
    with _cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchone()


def _vacuum_analyze() -> None:
    """So each measurement starts from a table autovacuum would have left (needs autocommit)."""
    _execute(f"VACUUM (ANALYZE) {sql.TABLE}")


def _max_job_id() -> int:
    return int(_fetchone(f"SELECT coalesce(max(id), 0) FROM {sql.TABLE}")[0])


def _delete_queue(queue: str, after_id: int, status: str | None = None) -> int:
    """Delete the scratch queue's rows (ids above ``after_id`` keep it a primary-key range)."""
    query = f"DELETE FROM {sql.TABLE} WHERE id > %s AND queue = %s"
    params: list[Any] = [after_id, queue]
    if status is not None:
        query += " AND status = %s"
        params.append(status)
    return _execute(query, params)


def _count_active(queue: str) -> int:
    """Pending plus running jobs of ``queue`` (two small partial-index scans)."""
    row = _fetchone(
        f"SELECT (SELECT count(*) FROM {sql.TABLE} WHERE queue = %s AND status = 'pending')"
        f" + (SELECT count(*) FROM {sql.TABLE} WHERE queue = %s AND status = 'running')",
        [queue, queue],
    )
    return int(row[0])


def _status_counts(queue: str, after_id: int) -> dict[str, int]:
    with _cursor() as cursor:
        cursor.execute(
            f"SELECT status, count(*) FROM {sql.TABLE} WHERE id > %s AND queue = %s "
            "GROUP BY status",
            [after_id, queue],
        )
        return {row[0]: int(row[1]) for row in cursor.fetchall()}


# ----- worker child processes ------------------------------------------------------------------


class WorkerProcess:
    """``manage.py run_jobs`` in a forked child: the real command, with the bench jobs known."""

    def __init__(self, **run_jobs_options: Any) -> None:
        self.options = run_jobs_options
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.cpu_seconds = 0.0

    def start(self) -> None:
        # Never share a database connection across fork.
        connections.close_all()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: run the command, never return into the caller
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                call_command("run_jobs", verbosity=0, **self.options)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        self.pid = pid

    def poll(self) -> int | None:
        if self.exit_code is None and self.pid is not None:
            pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self.exit_code = os.waitstatus_to_exitcode(status)
                # The child's and its reaped children's (the supervisor reaps its workers).
                self.cpu_seconds = rusage.ru_utime + rusage.ru_stime
        return self.exit_code

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.exit_code

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a graceful stop), then SIGKILL if it has not exited in ``timeout``."""
        if self.pid is None or self.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        if self.wait(timeout) is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait(5.0)

    def rss_kib(self, key: str = "VmRSS") -> int:
        """``VmRSS`` (or ``VmHWM``...) of the child from /proc, in KiB; 0 when unavailable."""
        with contextlib.suppress(OSError), open(f"/proc/{self.pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return 0


class BackendCPU:
    """CPU seconds used so far by the PostgreSQL backends serving some application names.

    Read from /proc, so only when the server runs on this machine (and the benchmark may read
    its processes); ``available`` is False otherwise. A backend's last reading is kept after it
    exits, so sample often: whatever it used after its last reading is missed.
    """

    def __init__(self, application_prefix: str) -> None:
        self.application_prefix = application_prefix
        self.seconds: dict[int, float] = {}
        self._next_lookup = 0.0
        host = str(connections[settings.DATABASE].settings_dict.get("HOST") or "")
        self.available = (
            host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")
        ) and os.path.exists("/proc/self/stat")
        self._tick = os.sysconf("SC_CLK_TCK") if self.available else 100

    def sample(self, lookup: bool = True) -> None:
        if not self.available:
            return
        now = time.monotonic()
        if lookup and now >= self._next_lookup:
            self._next_lookup = now + 0.1
            with _cursor() as cursor:
                cursor.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
                    [self.application_prefix.replace("%", r"\%").replace("_", r"\_") + "%"],
                )
                for (pid,) in cursor.fetchall():
                    self.seconds.setdefault(pid, 0.0)
        for pid in self.seconds:
            used = self.read(pid)
            if used is not None:
                self.seconds[pid] = used

    def read(self, pid: int) -> float | None:
        """CPU seconds used so far by the backend process ``pid`` (None: not readable)."""
        try:
            with open(f"/proc/{pid}/comm") as fh:
                if not fh.read().startswith("postgres"):
                    return None
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / self._tick

    @property
    def total(self) -> float | None:
        return sum(self.seconds.values()) if self.available and self.seconds else None


# ----- the phases ------------------------------------------------------------------------------


class Bench:
    def __init__(self, options: BenchOptions, progress: Progress | None = None) -> None:
        unknown = set(options.phases) - set(PHASES)
        if unknown:
            raise ValueError(f"Unknown phases: {', '.join(sorted(unknown))}")
        self.options = options
        self.progress: Progress = progress or NoProgress()
        self.queue = new_queue_name()
        self.mark = 0  # every row of the scratch queue has a greater id
        self.children: list[WorkerProcess] = []
        self.result = BenchResult()

    @property
    def noop(self) -> Any:
        return noop.using(queue=self.queue)

    def run(self) -> BenchResult:
        options = self.options
        self.mark = _max_job_id()
        self.result.machine = machine_info()
        self.result.settings = queue_settings(options, self.queue)
        others = workers_serving_every_queue()
        if others:
            # They would claim the scratch queue's jobs too (and fail them: they don't know the
            # bench's job names), so the figures would not be this queue's.
            self.result.details["warning"] = (
                f"workers serving every queue are running ({', '.join(others)}): they take "
                "jobs from the scratch queue too; stop them or give them --queue"
            )
            self.progress.start("warning: " + self.result.details["warning"])
            self.progress.finish("")
        try:
            # Every run starts from a vacuumed table, so the dead rows of an earlier run (or of
            # anything else) don't make it slower than the next.
            self.progress.start(f"VACUUM (ANALYZE) {sql.TABLE}")
            started = time.perf_counter()
            _vacuum_analyze()
            self.progress.finish(f"{time.perf_counter() - started:.1f} s")
            if "enqueue" in options.phases or "drain" in options.phases:
                self.enqueue_bulk()
            if "drain" in options.phases:
                self.drain()
            if "single" in options.phases:
                self.enqueue_single()
            if "pickup" in options.phases:
                self.pickup()
            if "history" in options.phases:
                self.history()
        finally:
            self.cleanup()
        self.result.machine["load_average_1m_end"] = round(os.getloadavg()[0], 2)
        return self.result

    def cleanup(self) -> None:
        """Stop our workers and delete every row of the scratch queue (runs on Ctrl-C too)."""
        for child in self.children:
            child.stop()
        self.children.clear()
        from django_pgqueue.models import Worker

        _delete_queue(self.queue, self.mark)
        Worker.objects.using(settings.DATABASE).filter(worker_id__startswith=self.queue).delete()
        # Leave no dead rows behind for the next run (or the real queues) to step over.
        _vacuum_analyze()

    def _start_worker(self, **options: Any) -> WorkerProcess:
        child = WorkerProcess(queues=[self.queue], **options)
        self.children.append(child)
        child.start()
        return child

    # enqueue_bulk_per_s -----------------------------------------------------------------------

    def enqueue_bulk(self) -> None:
        count = self.options.jobs
        self.progress.start(f"enqueue_many {count:,} jobs", count)
        started = time.perf_counter()
        ids = self.noop.enqueue_many([()] * count)
        seconds = time.perf_counter() - started
        if len(ids) != count:
            raise BenchError(f"enqueue_many returned {len(ids)} ids for {count} jobs")
        self.result.enqueue_bulk_per_s = round(count / seconds, 1)
        self.result.details["enqueue_bulk_s"] = round(seconds, 4)
        self.progress.finish(f"{self.result.enqueue_bulk_per_s:,.0f} jobs/s")

    # drain_per_s ------------------------------------------------------------------------------

    def drain(self) -> None:
        options = self.options
        count = options.jobs
        self.progress.start(f"drain with {options.processes} processes", count)
        worker_id = f"{self.queue}:drain"
        backends = BackendCPU(f"pgqueue worker {worker_id}")
        started_wall = time.time()
        started = time.perf_counter()
        child = self._start_worker(
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
            if self.progress.live and time.perf_counter() >= next_update:
                next_update = time.perf_counter() + 0.25
                self.progress.update(count - _count_active(self.queue))
        exited = time.perf_counter() - started
        if child.exit_code != 0:
            raise BenchError(f"run_jobs --burst exited with status {child.exit_code}")
        counts = _status_counts(self.queue, self.mark)
        if counts.get("completed", 0) != count or len(counts) != 1:
            raise BenchError(f"Drain left the scratch queue as {counts}, not {count} completed")
        last = _fetchone(
            f"SELECT max(finished_at) FROM {sql.TABLE} WHERE id > %s AND queue = %s",
            [self.mark, self.queue],
        )[0]
        seconds = last.timestamp() - started_wall
        self.result.drain_per_s = round(count / seconds, 1)
        self.result.details["drain_s"] = round(seconds, 4)
        self.result.details["drain_until_exit_s"] = round(exited, 4)
        # Where the time goes, independent of what else runs on the machine: CPU per job in
        # the worker processes and in their database backends, and the rate those would allow
        # if they had every CPU of this machine to themselves.
        worker_us = child.cpu_seconds / count * 1e6
        self.result.details["drain_worker_cpu_us_per_job"] = round(worker_us, 1)
        if backends.total is not None:
            postgres_us = backends.total / count * 1e6
            self.result.details["drain_postgres_cpu_us_per_job"] = round(postgres_us, 1)
            self.result.details["drain_cpu_bound_ceiling_per_s"] = round(
                (os.cpu_count() or 1) / (worker_us + postgres_us) * 1e6
            )
        self.progress.finish(f"{self.result.drain_per_s:,.0f} jobs/s")
        _delete_queue(self.queue, self.mark)

    # enqueue_single_ms_p50/p99 ----------------------------------------------------------------

    def enqueue_single(self) -> None:
        count = self.options.single_samples
        self.progress.start(f"enqueue() x {count:,}", count)
        handle = self.noop
        handle.enqueue()  # connect and warm up outside the sample
        timings: list[float] = []
        for index in range(count):
            started = time.perf_counter()
            handle.enqueue()
            timings.append((time.perf_counter() - started) * 1000)
            if self.progress.live and index % 50 == 0:
                self.progress.update(index)
        self.result.enqueue_single_ms_p50 = round(percentile(timings, 50), 3)
        self.result.enqueue_single_ms_p99 = round(percentile(timings, 99), 3)
        self.progress.finish(
            f"p50 {self.result.enqueue_single_ms_p50:.3f} ms, "
            f"p99 {self.result.enqueue_single_ms_p99:.3f} ms"
        )
        _delete_queue(self.queue, self.mark)

    # pickup_ms_p50/p99 ------------------------------------------------------------------------

    def pickup(self) -> None:
        import random

        count = self.options.pickup_samples
        self.progress.start(f"pickup x {count:,}", count)
        worker_id = f"{self.queue}:pickup"
        child = self._start_worker(processes=1, threads=self.options.threads, worker_id=worker_id)
        self._wait_listening(child, worker_id)
        handle = record_start.using(queue=self.queue)
        # Warm-up: the first jobs pay for imports and connections in the worker.
        for _ in range(5):
            self._wait_done([handle.enqueue().pk], child)
        committed: dict[int, float] = {}
        low, high = self.options.pickup_pause
        for index in range(count):
            time.sleep(random.uniform(low, high))
            job_id = handle.enqueue().pk  # autocommit: returns once the INSERT committed
            committed[job_id] = time.time()
            if self.progress.live and index % 10 == 0:
                self.progress.update(index)
        self._wait_done(list(committed), child)
        child.stop()
        from django_pgqueue.models import Job

        rows = Job.objects.using(settings.DATABASE).filter(pk__in=list(committed))
        latencies = [
            (float(started) - committed[pk]) * 1000
            for pk, started in rows.values_list("pk", "result")
            if started is not None
        ]
        if len(latencies) != count:
            raise BenchError(f"{count - len(latencies)} pickup jobs did not run")
        self.result.pickup_ms_p50 = round(percentile(latencies, 50), 3)
        self.result.pickup_ms_p99 = round(percentile(latencies, 99), 3)
        self.result.details["pickup_ms_max"] = round(max(latencies), 3)
        self.progress.finish(
            f"p50 {self.result.pickup_ms_p50:.3f} ms, p99 {self.result.pickup_ms_p99:.3f} ms"
        )
        _delete_queue(self.queue, self.mark)

    def _wait_listening(self, child: WorkerProcess, worker_id: str, timeout: float = 30) -> None:
        """Until the worker's listener connection has run LISTEN."""
        if not settings.LISTEN:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise BenchError(f"The pickup worker exited with status {child.exit_code}")
            row = _fetchone(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND query ILIKE 'LISTEN%%'",
                [f"pgqueue listener {worker_id}"[:63]],
            )
            if row[0]:
                return
            time.sleep(0.02)
        raise BenchError("The pickup worker did not start listening")

    def _wait_done(self, job_ids: list[int], child: WorkerProcess, timeout: float = 60) -> None:
        from django_pgqueue.models import Job

        deadline = time.monotonic() + timeout
        jobs = Job.objects.using(settings.DATABASE).filter(pk__in=job_ids)
        while jobs.exclude(status="completed").exists():
            if child.poll() is not None:
                raise BenchError(f"The pickup worker exited with status {child.exit_code}")
            if time.monotonic() > deadline:
                raise BenchError("Pickup jobs were not run in time")
            time.sleep(0.01)

    # history_claim_ratio ----------------------------------------------------------------------

    def history(self) -> None:
        options = self.options
        self.progress.start("claim+complete, empty history", options.claim_repeats)
        _delete_queue(self.queue, self.mark)
        empty = self._claim_rates()
        self.progress.finish(_describe_claims(empty))

        rows = options.history_rows
        self.progress.start(f"insert {rows:,} history rows", None)
        started = time.perf_counter()
        insert_history(self.queue, rows)
        self.result.details["history_insert_s"] = round(time.perf_counter() - started, 2)
        self.progress.finish(f"{time.perf_counter() - started:.1f} s")

        self.progress.start(f"claim+complete, {rows:,} history rows", options.claim_repeats)
        full = self._claim_rates()
        self.progress.finish(_describe_claims(full))

        # The best of the runs, as ``timeit`` does: on a shared machine a run only ever gets
        # slower than the code allows. Where the database runs on this machine, throughput per
        # CPU-second (client and backend) is compared: wall time swings with whatever else
        # runs, the work per job does not.
        wall_empty = max(r.per_s for r in empty)
        wall_full = max(r.per_s for r in full)
        cpu_empty = [r.cpu_per_s for r in empty if r.cpu_per_s is not None]
        cpu_full = [r.cpu_per_s for r in full if r.cpu_per_s is not None]
        details = self.result.details
        details["claim_per_s_empty"] = round(wall_empty, 1)
        details["claim_per_s_history"] = round(wall_full, 1)
        details["claim_per_s_wall_ratio"] = round(wall_full / wall_empty, 3)
        if cpu_empty and cpu_full:
            details["claim_per_cpu_s_empty"] = round(max(cpu_empty), 1)
            details["claim_per_cpu_s_history"] = round(max(cpu_full), 1)
            self.result.history_claim_ratio = round(max(cpu_full) / max(cpu_empty), 3)
            details["history_claim_ratio_basis"] = "jobs per CPU-second (client + backend)"
        else:
            self.result.history_claim_ratio = details["claim_per_s_wall_ratio"]
            details["history_claim_ratio_basis"] = "jobs per second (wall clock)"

        self.progress.start(f"delete {rows:,} history rows", None)
        started = time.perf_counter()
        _delete_queue(self.queue, self.mark)
        _vacuum_analyze()
        self.progress.finish(f"{time.perf_counter() - started:.1f} s")

    def _claim_rates(self) -> list[ClaimRun]:
        """``claim_repeats`` runs of :func:`claim_throughput` on ``claim_jobs`` fresh jobs."""
        rates = []
        for repeat in range(self.options.claim_repeats):
            before = _max_job_id()
            self.noop.enqueue_many([()] * self.options.claim_jobs)
            _vacuum_analyze()
            rates.append(
                claim_throughput(
                    self.queue, f"{self.queue}:claim", self.options.resolved_batch_size()
                )
            )
            _delete_queue(self.queue, before)
            self.progress.update(repeat + 1)
        return rates


def _describe_claims(runs: Sequence[ClaimRun]) -> str:
    text = f"{max(r.per_s for r in runs):,.0f} jobs/s"
    cpu = [r.cpu_per_s for r in runs if r.cpu_per_s is not None]
    if cpu:
        text += f", {max(cpu):,.0f} jobs per CPU-second"
    return text + " (best)"


def workers_serving_every_queue() -> list[str]:
    """Live workers started without ``--queue`` (seen in the last two heartbeats)."""
    from django_pgqueue.models import Worker

    recent = timezone.now() - timedelta(seconds=2 * settings.HEARTBEAT_INTERVAL + 5)
    return list(
        Worker.objects.using(settings.DATABASE)
        .filter(stopped_at__isnull=True, last_seen_at__gte=recent, queues=[])
        .values_list("worker_id", flat=True)
    )


def insert_history(queue: str, rows: int) -> None:
    """``rows`` finished jobs in ``queue`` (90% completed, 10% dead with an error), then
    VACUUM ANALYZE as autovacuum would after such a load."""
    _execute(
        f"""
        INSERT INTO {sql.TABLE} (queue, name, args, kwargs, status, priority, run_after,
            attempts, max_attempts, locked_by, last_error, errors, result,
            created_at, started_at, finished_at)
        SELECT %s, 'django_pgqueue.bench.noop', '[]', '{{}}',
            CASE WHEN i %% 10 = 0 THEN 'dead' ELSE 'completed' END, 0, t,
            1, 1, 'pgqueue-bench-history',
            CASE WHEN i %% 10 = 0 THEN 'RuntimeError: boom' ELSE '' END,
            CASE WHEN i %% 10 = 0 THEN '[{{"attempt": 1, "exception_class": "RuntimeError"}}]'
                 ELSE '[]' END::jsonb,
            CASE WHEN i %% 10 = 0 THEN NULL ELSE 'null' END::jsonb,
            t, t, t + interval '1 millisecond'
        FROM generate_series(1, %s) AS i,
             LATERAL (SELECT now() - (%s - i) * interval '1 millisecond') AS s(t)
        """,
        [queue, rows, rows],
    )
    _vacuum_analyze()


@dataclass(frozen=True)
class ClaimRun:
    jobs: int
    seconds: float  # wall clock
    cpu_seconds: float | None  # this process plus its database backend; None if not local

    @property
    def per_s(self) -> float:
        return self.jobs / self.seconds

    @property
    def cpu_per_s(self) -> float | None:
        """Jobs per CPU-second: what the loop would do alone on an idle machine."""
        return None if not self.cpu_seconds else self.jobs / self.cpu_seconds


def claim_throughput(queue: str, worker_id: str, batch_size: int) -> ClaimRun:
    """The worker's two statements alone, in a loop: claim a batch, write the batch back as
    completed, until the queue is empty. No job code, no worker threads.

    Measures wall time, and the CPU time of this process and of its database backend: on a
    machine shared with other work, the CPU time per job is the figure that stays put.
    """
    from django_pgqueue import operations
    from django_pgqueue.worker.connection import QueueConnection

    done = 0
    # The worker's own connection and the exact operations its loop calls.
    connection = QueueConnection(settings.DATABASE, f"pgqueue bench {worker_id}")
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend_pid = int(cursor.fetchone()[0])  # type: ignore[index]
        backend = BackendCPU("")
        server_before = backend.read(backend_pid) if backend.available else None
        client_before = time.process_time()
        started = time.perf_counter()
        while True:
            jobs, _ = operations.claim_counted(
                connection, worker_id, [queue], batch_size, settings.VISIBILITY_TIMEOUT
            )
            if not jobs:
                break
            now = datetime.now(UTC)
            operations.finish(
                connection,
                worker_id,
                [
                    operations.Outcome(job.pk, "completed", now, now, result_json="null")
                    for job in jobs
                ],
                delete_completed=False,
            )
            done += len(jobs)
        seconds = time.perf_counter() - started
        client = time.process_time() - client_before
        server_after = backend.read(backend_pid) if server_before is not None else None
    finally:
        connection.close()
    if done == 0:
        raise BenchError("Nothing to claim")
    cpu = None
    if server_before is not None and server_after is not None:
        cpu = client + server_after - server_before
    return ClaimRun(done, seconds, cpu)


# ----- worker memory ---------------------------------------------------------------------------


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
    mark = _max_job_id()
    machine = machine_info()
    worker_id = f"{queue}:memory"
    child = WorkerProcess(
        queues=[queue], processes=1, threads=threads, batch_size=batch_size, worker_id=worker_id
    )
    handle = noop.using(queue=queue)
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
            active = _count_active(queue)
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
        from django_pgqueue.models import Worker

        _delete_queue(queue, mark)
        Worker.objects.using(settings.DATABASE).filter(worker_id__startswith=queue).delete()
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


def describe(result: BenchResult) -> list[tuple[str, str, str]]:
    """(figure, value, target) rows for the human-readable table."""

    def fmt(value: float | None, spec: str) -> str:
        return "skipped" if value is None else format(value, spec)

    return [
        ("enqueue_bulk_per_s", fmt(result.enqueue_bulk_per_s, ",.0f"), ">= 50,000"),
        ("enqueue_single_ms_p50", fmt(result.enqueue_single_ms_p50, ".3f"), "<= 1.5"),
        ("enqueue_single_ms_p99", fmt(result.enqueue_single_ms_p99, ".3f"), ""),
        ("drain_per_s", fmt(result.drain_per_s, ",.0f"), ">= 10,000 (2 processes)"),
        ("pickup_ms_p50", fmt(result.pickup_ms_p50, ".3f"), "<= 5"),
        ("pickup_ms_p99", fmt(result.pickup_ms_p99, ".3f"), "<= 25"),
        ("history_claim_ratio", fmt(result.history_claim_ratio, ".3f"), ">= 0.9"),
    ]
