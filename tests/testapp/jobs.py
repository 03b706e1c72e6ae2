"""Jobs the tests enqueue; autodiscovered like any app's ``jobs`` module."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import threading
import time
from pathlib import Path

from django.db import connection, transaction

from django_pgqueue import JobInterrupted, current_job, job, signals


@job
def add(a: int, b: int) -> int:
    return a + b


@job
def noop() -> None:
    return None


@job(queue="emails", priority=10, max_attempts=5)
def send_welcome(user_id: int) -> None:
    return None


@job(max_attempts=3)
def always_fails(message: str = "boom") -> None:
    raise RuntimeError(message)


@job(max_attempts=5)
def fails_until(marker: str, succeed_on: int) -> int:
    """Fails until the file ``marker`` counts ``succeed_on`` calls."""
    path = Path(marker)
    count = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(count))
    if count < succeed_on:
        raise ValueError(f"attempt {count} fails")
    return count


@job
def record(path: str, value: str, sleep: float = 0.0) -> str:
    """Appends ``value`` and the worker's pid to a file, optionally after sleeping."""
    if sleep:
        time.sleep(sleep)
    with open(path, "a") as fh:
        fh.write(f"{value} {os.getpid()}\n")
    return value


@job
def collector_state() -> list[int]:
    """How many objects the process keeps out of the garbage collector's sight, and how many new
    ones start a young collection."""
    return [gc.get_freeze_count(), gc.get_threshold()[0]]


@job
def returns_set() -> object:
    return {1, 2}


@job(timeout=1.0, max_attempts=2)
def hangs(seconds: float) -> None:
    """Sleeps past its 1 s timeout: the worker must give up on it and carry on."""
    time.sleep(seconds)


@job(max_attempts=3)
def until_cancelled(marker: str, fail: bool = False) -> str:
    """Reports progress every 0.1 s until cancelled (at most ~10 min), then stops: returns, or
    raises with ``fail``. Writes what it saw to ``marker``."""
    me = current_job()
    Path(marker).write_text(f"started {me.id} attempt {me.attempt}\n")
    for step in range(6000):
        me.set_progress(step, 6000, "working")
        if me.cancel_requested:
            with open(marker, "a") as fh:
                fh.write("saw cancel\n")
            if fail:
                raise RuntimeError("stopping because I was cancelled")
            return "stopped"
        time.sleep(0.1)
    return "never cancelled"


@job(max_attempts=3)
def ignores_cancel(marker: str, seconds: float) -> str:
    """Sleeps ``seconds`` without ever looking at ``cancel_requested``."""
    Path(marker).write_text("started\n")
    time.sleep(seconds)
    with open(marker, "a") as fh:
        fh.write("finished\n")
    return "done"


@job(max_attempts=3)
def ignores_cancel_until(marker: str, release: str) -> str:
    """Sleeps in short steps, never looking at ``cancel_requested``, until the file ``release``
    exists (at most ~10 min)."""
    Path(marker).write_text("started\n")
    for _ in range(12000):
        if Path(release).exists():
            break
        time.sleep(0.05)
    with open(marker, "a") as fh:
        fh.write("finished\n")
    return "done"


# ----- faulty jobs (tests/test_faults_jobs.py) ------------------------------------------------
# Each does one thing a real job can do to its worker; the tests run them among healthy jobs in
# real run_jobs subprocesses.

#: The table the database-writing fault jobs write to (created by the tests with raw SQL).
WRITES_TABLE = "pgqueue_test_writes"


@job(max_attempts=3)
def long_export(path: str, seconds: float, cooperative: bool = True) -> str:
    """A long job for deploy tests: appends ``start <pid>`` to ``path``, then works ``seconds``
    in 10 ms steps. Cooperative, it stops at the first step after its worker's shutdown began,
    handing itself back; else it ignores the shutdown."""
    me = current_job()
    with open(path, "a") as f:
        f.write(f"start {os.getpid()}\n")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cooperative and me.shutdown_requested:
            raise JobInterrupted("stopped at a safe point: the worker is shutting down")
        time.sleep(0.01)
    with open(path, "a") as f:
        f.write(f"done {os.getpid()}\n")
    return "exported"


@job(max_attempts=2)
def interrupted_until(marker: str, times: int) -> int:
    """Hands itself back ``times`` times (counted in ``marker``), then returns the count."""
    runs = Path(marker).read_text().count("x") if Path(marker).exists() else 0
    if runs < times:
        Path(marker).write_text("x" * (runs + 1))
        raise JobInterrupted(f"interrupted {runs + 1}")
    return runs


@job(timeout=1.0, max_attempts=1)
def spins(path: str) -> None:
    """Ignores everything (its timeout, a cancel, the shutdown): appends its pid to ``path``
    every 20 ms for ever. Only the end of its process stops it."""
    while True:
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.02)


@job(max_attempts=2)
def returns_nul() -> str:
    return "a\x00b"


@job(max_attempts=2)
def returns_lone_surrogate() -> str:
    return "a\ud800b"


@job(max_attempts=2)
def returns_over_jsonb_limit() -> str:
    """A 300 MB string: more than jsonb's 256 MB (and our 64 MB result limit)."""
    return "x" * (300 * 1024 * 1024)


@job(max_attempts=2)
def returns_nan() -> float:
    return float("nan")


@job(max_attempts=2)
def returns_too_deep() -> list[object]:
    """A list nested 100,000 levels deep: the JSON encoder hits the recursion limit."""
    value: list[object] = []
    for _ in range(100_000):
        value = [value]
    return value


@job(max_attempts=2)
def raises_huge_message() -> None:
    raise ValueError("x" * (100 * 1024 * 1024))


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ of this exception raises")


@job(max_attempts=2)
def raises_unprintable() -> None:
    raise Unprintable()


@job(max_attempts=2)
def raises_with_nul() -> None:
    raise ValueError("bad byte \x00 and a lone \ud800 in the message")


class Halt(BaseException):
    """A BaseException that is not an Exception (like gevent's or trio's cancellations)."""


@job(max_attempts=2)
def calls_sys_exit() -> None:
    sys.exit(3)


@job(max_attempts=2)
def raises_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("from a job")


@job(max_attempts=2)
def raises_base_exception() -> None:
    raise Halt("a BaseException subclass")


@job(max_attempts=2)
def leaves_transaction_open(tag: str) -> None:
    """Writes a row inside ``transaction.atomic()`` and returns without leaving the block."""
    transaction.atomic().__enter__()
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {WRITES_TABLE} (tag) VALUES (%s)", [tag])


@job(max_attempts=2)
def leaves_autocommit_off(tag: str) -> None:
    """Turns autocommit off, writes a row and returns without committing."""
    transaction.set_autocommit(False)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {WRITES_TABLE} (tag) VALUES (%s)", [tag])


@job(max_attempts=5)
def host_run(path: str, sleep: float = 0.0) -> None:
    """Sleeps, then records its run (job id, attempt, worker id) on a line of its own at the
    end of ``path``: a job run twice leaves two lines (tests/test_hosts.py, workers on
    separate hosts). One ``write`` of a short line with ``O_APPEND``: lines never interleave."""
    if sleep:
        time.sleep(sleep)
    run = current_job()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{run.id} {run.attempt} {run.worker_id}\n".encode())
    finally:
        os.close(fd)


@job
def writes_row(tag: str) -> int:
    """Writes a row in its own transaction and counts the table: a job that needs the DB."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {WRITES_TABLE} (tag) VALUES (%s)", [tag])
        cursor.execute(f"SELECT count(*) FROM {WRITES_TABLE}")
        return int(cursor.fetchone()[0])


@job(max_attempts=3)
def exits_process() -> None:
    os._exit(1)


@job(max_attempts=3)
def segfaults() -> None:
    ctypes.string_at(0)


@job(max_attempts=3)
def kills_own_process() -> None:
    """SIGKILL, the OOM killer's signal."""
    os.kill(os.getpid(), signal.SIGKILL)


@job(max_attempts=1)
def forks(path: str, child: str) -> int:
    """Forks; the child returns, calls ``sys.exit(0)`` or raises (``child``), and the parent
    waits for it, writes its pid to ``path`` and returns its exit status."""
    pid = os.fork()
    if pid == 0:
        if child == "exit":
            sys.exit(0)
        if child == "raise":
            raise RuntimeError("raised in the forked child")
        return -1  # the child returns: a value nobody records
    Path(path).write_text(str(pid))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


# ----- receivers that raise, connected only in worker subprocesses that ask for them ------------


def broken_started(sender: object, **kwargs: object) -> None:
    raise RuntimeError("a job_started receiver that raises")


def broken_finished(sender: object, **kwargs: object) -> None:
    raise SystemExit("a job_finished receiver that exits")


if os.environ.get("PGQUEUE_TEST_BROKEN_RECEIVERS"):
    signals.job_started.connect(broken_started)
    signals.job_finished.connect(broken_finished)


# ----- for the test helpers (tests/test_testing.py) ------------------------------------------


@job
def create_group(name: str) -> int:
    """Writes a row the test can see (auth's Group: the test app has no models)."""
    from django.contrib.auth.models import Group

    return Group.objects.create(name=name).pk


@job(max_attempts=2)
def create_group_then_fail(name: str) -> None:
    """Writes, then breaks the transaction with a unique violation (the name exists)."""
    from django.contrib.auth.models import Group

    Group.objects.create(name=f"{name}-written")
    Group.objects.create(name=name)


@job(max_attempts=1)
def leaves_atomic_open() -> None:
    from django.db import transaction

    transaction.atomic().__enter__()


@job
def enqueues_itself() -> None:
    enqueues_itself.enqueue()


@job
def countdown(n: int) -> int:
    """Enqueues countdown(n - 1) until 0: jobs enqueued by jobs."""
    if n > 0:
        countdown.enqueue(n - 1)
    return n


@job(max_attempts=10)
def db_record(path: str, value: str, sleep: float = 0.0) -> str:
    """``record`` after a query on Django's connection (so it fails while the database is
    away: the worker's executor threads meet Django's wrapped database errors)."""
    from django.db import connection

    if sleep:
        time.sleep(sleep)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return record(path, value)


@job
def interrupts_its_thread(marker: str) -> None:
    """Half a second after returning, raises SystemExit asynchronously in the executor thread
    that ran it (waiting for its next job): an exception in the worker's own code, not a job's."""
    target = threading.get_ident()

    def fire() -> None:
        time.sleep(0.5)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(target), ctypes.py_object(SystemExit)
        )
        Path(marker).write_text("fired")

    threading.Thread(target=fire, daemon=True).start()


def _probe(table: str, key: str, seconds: float) -> None:
    """Records when this run started and ended (the database's clock) in ``table``."""
    from django.db import connection

    me = current_job()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (job_id, key, started) "
            "VALUES (%s, %s, extract(epoch FROM clock_timestamp()))",
            [me.id, key],
        )
    time.sleep(seconds)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET ended = extract(epoch FROM clock_timestamp()) WHERE job_id = %s",
            [me.id],
        )


@job(concurrency_limit=3)
def three_at_a_time(table: str, key: str, seconds: float) -> None:
    """At most 3 running per concurrency key (given with using(concurrency_key=...))."""
    _probe(table, key, seconds)


@job
def probe(table: str, key: str, seconds: float) -> None:
    _probe(table, key, seconds)


@job(rate_limit="10/s", rate_key="stripe")
def charge(order_id: int, table: str = "") -> int:
    """At most 10 starts per second across all workers; records its claim time in ``table``."""
    if table:
        from django.db import connection

        me = current_job()
        assert me.claimed_at is not None
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (job_id, key, started, ended) VALUES (%s, 'stripe', %s, %s)",
                [me.id, me.claimed_at.timestamp(), me.claimed_at.timestamp()],
            )
    return order_id


@job(queue="emails", max_attempts=4)
def reports_itself(steps: int) -> dict[str, object]:
    """Uses every attribute of ``current_job()``: what a test calling it directly sees."""
    me = current_job()
    done = 0
    for step in range(steps):
        if me.cancel_requested:
            break
        done = step + 1
        me.set_progress(done, steps, f"step {done}")
    return {
        "id": me.id,
        "name": me.name,
        "queue": me.queue,
        "attempt": me.attempt,
        "max_attempts": me.max_attempts,
        "claimed": me.claimed_at is not None,
        "cancel_requested": me.cancel_requested,
        "done": done,
        "progress": me.progress,
        "same": current_job() is me,
    }


@job(max_attempts=2)
def traced(fail: bool = False) -> str | None:
    """Makes a span of its own (a child of the run's, which is current) and logs a line of its
    own logger, with an ``extra`` field of its own; fails when asked."""
    import logging

    from opentelemetry import trace

    with trace.get_tracer("tests.testapp").start_as_current_span("inside the job") as span:
        span.set_attribute("job.note", "made by the job")
    logging.getLogger("tests.testapp.traced").info(
        "the job speaks", extra={"note": "its own field"}
    )
    if fail:
        raise ValueError("traced job failed on purpose")
    return trace.get_current_span().get_span_context().trace_id.to_bytes(16).hex()


@job
def collect_parents(path: str, tag: str) -> str:
    """Appends its tag and the results of the jobs it waited for (workflows)."""
    import json

    results = current_job().parent_results
    with open(path, "a") as fh:
        fh.write(json.dumps({"tag": tag, "parents": {str(k): v for k, v in results.items()}}))
        fh.write("\n")
    return tag


@job
def batch_report(path: str, callback: str) -> None:
    """A batch callback: appends which one ran, its batch and the batch's counts."""
    import json

    batch = current_job().batch
    assert batch is not None
    with open(path, "a") as fh:
        fh.write(json.dumps({"callback": callback, "batch": batch.id, "counts": batch.counts()}))
        fh.write("\n")


@job(max_attempts=1)
def fails_once_dead(message: str = "boom") -> None:
    raise RuntimeError(message)


@job
def stalls_first_time(marker: str, seconds: float = 120.0) -> str:
    """Its first attempt writes ``marker`` and sleeps (to be killed under); later ones return."""
    path = Path(marker)
    if not path.exists():
        path.write_text(str(os.getpid()))
        time.sleep(seconds)
    return "done"


# The async def jobs, registered when this module is discovered.
from tests.testapp import async_jobs  # noqa: E402, F401
