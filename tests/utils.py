"""Helpers to run real worker subprocesses against the test database, and to move the ready
ring along without one."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db import connection, connections

ROOT = Path(__file__).resolve().parent.parent


def worker_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess that uses the same (test) database as this test."""
    env = dict(os.environ)
    db = connection.settings_dict
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        PYTHONUNBUFFERED="1",
    )
    # tests.settings reads PG* when DATABASE_URL is unset: point them at this test database.
    env.pop("DATABASE_URL", None)
    for var, key in [
        ("PGDATABASE", "NAME"),
        ("PGHOST", "HOST"),
        ("PGPORT", "PORT"),
        ("PGUSER", "USER"),
        ("PGPASSWORD", "PASSWORD"),
    ]:
        if db.get(key):
            env[var] = str(db[key])
    env.update(extra)
    return env


def manage(*args: str) -> list[str]:
    return [sys.executable, "-m", "django", *args]


def start_worker(
    *args: str, env: dict[str, str] | None = None, **popen: Any
) -> subprocess.Popen[str]:
    """Start ``manage.py run_jobs ARGS`` in its own process group.

    Its output goes to a temporary file (an unread pipe would block the worker once full);
    :func:`stop` and :func:`output` read it.
    """
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115  (closed by stop())
        mode="w+", prefix="pgqueue-worker-", suffix=".log", delete=False
    )
    proc = subprocess.Popen(
        manage("run_jobs", *args),
        env=env or worker_env(),
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **popen,
    )
    proc.log_path = log.name  # type: ignore[attr-defined]
    log.close()
    return proc


def output(proc: subprocess.Popen[str]) -> str:
    """What the worker started by :func:`start_worker` has printed so far."""
    return Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]


def run_worker(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py run_jobs --burst ARGS`` to completion and return its result."""
    return subprocess.run(
        manage("run_jobs", "--burst", *args),
        env=env or worker_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def wait_until(predicate: Any, timeout: float = 60.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds.

    The timeout is a deadline against hangs, not a speed assertion.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


def stop(proc: subprocess.Popen[str], sig: int | None = None, timeout: float = 60) -> str:
    """Send ``sig`` (default SIGTERM) to the worker's process group; return its output."""
    import signal as signal_module

    if proc.poll() is None:
        os.killpg(proc.pid, sig or signal_module.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Never leave it running: it would take the jobs of every test after this one.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal_module.SIGKILL)
        proc.wait(timeout=30)
        raise AssertionError(
            f"run_jobs did not exit within {timeout}s of the signal (killed); its log ends:\n"
            + output(proc)[-5000:]
        ) from None
    text = output(proc)
    Path(proc.log_path).unlink(missing_ok=True)  # type: ignore[attr-defined]
    return text


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie counts until its parent reaps it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def other_active_backends() -> int:
    """Statements running in the test database besides this test's own connection's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state = 'active'"
        )
        return int(cursor.fetchone()[0])


def run_threads(count: int, target: Callable[[int], object]) -> None:
    """Run ``target(0)`` .. ``target(count - 1)`` at once, each thread on its own database
    connection (closed at its end); fails with the first error any of them raised."""
    errors: list[BaseException] = []

    def wrapped(index: int) -> None:
        try:
            target(index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def claim_rows(
    db: Any,
    limit: int = 10,
    queues: list[str] | None = None,
    *,
    reclaim: bool = True,
    path: Any = None,
    stale_scan: Any = None,
) -> tuple[list[Any], int]:
    """``operations.claim`` for worker ``w`` (visibility timeout 60 s): the jobs and the rows
    taken. The database says which claim runs, as in production (``path``: a kept reading)."""
    from django_pgqueue import operations

    request = operations.ClaimRequest(
        worker_id="w", limit=limit, queues=queues, visibility_timeout=60.0, reclaim=reclaim
    )
    return operations.claim(db, request, path=path, stale_scan=stale_scan)


def claim_and_finish_all(db: Any, *, queues: list[str] | None = None) -> None:
    """Claim every runnable job (of ``queues``) on ``db`` as worker ``w``, 256 at a time, and
    record each completed, as a worker would, so the ready ring moves on."""
    from datetime import UTC, datetime

    from django_pgqueue import operations

    while batch := claim_rows(db, 256, queues)[0]:
        now = datetime.now(UTC)
        outcomes = [
            operations.Outcome(
                j.pk, "completed", now, now, result_json="null", claim_token=j.claim_token
            )
            for j in batch
        ]
        written = operations.finish(db, "w", outcomes, delete_completed=False)
        assert len(written) == len(batch)


def truncated_once_inserts_move_past(slot: int) -> None:
    """Enqueue and run (through a worker's connection, with the upkeep) a ring slot's worth of
    other jobs, so the inserts move past ring slot ``slot``; then it must be recycled: its
    file truncated to nothing, whatever it contained that could wait."""
    from django_pgqueue import operations
    from django_pgqueue.sql import ready
    from django_pgqueue.worker.connection import QueueConnection
    from tests.testapp import jobs

    queue_connection = QueueConnection("default", "pgqueue test recycle")
    try:
        for _ in range(ready.SLOT_SPAN // 1024 + 1):
            jobs.noop.enqueue_many([()] * 1024)
            claim_and_finish_all(queue_connection)
        assert slot in operations.recycle(queue_connection)
    finally:
        queue_connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size(%s::regclass)", [ready.slot_table(slot)])
        assert cursor.fetchone()[0] == 0


@contextlib.contextmanager
def migrated_back_to(migration: str) -> Any:
    """The queue's tables as migration ``migration`` left them, for the block (a cursor on
    the test database); migrated forward again afterwards, whatever happens."""
    from django.core.management import call_command

    call_command("migrate", "django_pgqueue", migration, verbosity=0)
    try:
        with connection.cursor() as cursor:
            yield cursor
    finally:
        call_command("migrate", "django_pgqueue", verbosity=0)


def ready_rows(column: str) -> dict[tuple[Any, str], int]:
    """Ready rows per (their ``column``, where): ``ring``, ``later``, ``parked`` or ``held``."""
    from django_pgqueue.sql import ready

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {column}, CASE slot WHEN %s THEN 'later' WHEN %s THEN 'parked' "
            "WHEN %s THEN 'held' ELSE 'ring' END, count(*) FROM pgqueue_ready GROUP BY 1, 2",
            [ready.LATER_SLOT, ready.PARKED_SLOT, ready.HELD_SLOT],
        )
        return {(value, where): count for value, where, count in cursor.fetchall()}


def enqueue_backlog(handle: Any) -> list[int]:
    """100 no-argument jobs of ``handle`` at three priorities; returns their ids in the order
    they should run (priority, then enqueue order)."""
    batches = [(0, 25), (5, 25), (0, 25), (10, 25)]
    ids = [(p, pk) for p, n in batches for pk in handle.using(priority=p).enqueue_many([()] * n)]
    return [pk for _, pk in sorted(ids, key=lambda item: (-item[0], item[1]))]


def finish_completed(batch: list[Any], *, delete: bool = False) -> None:
    """Write ``batch`` (jobs claimed by worker ``w``) back completed."""
    from django_pgqueue import operations

    now = datetime.now(UTC)
    outcomes = [
        operations.Outcome(
            j.pk, "completed", now, now, result_json="null", claim_token=j.claim_token
        )
        for j in batch
    ]
    written = operations.finish(
        operations.DjangoDatabase("default"), "w", outcomes, delete_completed=delete
    )
    assert len(written) == len(batch)


def assert_worker_runs_backlog_in_order(probe_table: str, handle: Any, held: Callable[[], bool]):
    """A ``run_jobs`` worker (4 threads) runs 60 ``probe`` jobs of ``handle`` (three
    priorities) and 20 free ones: ``held()`` turns true on the way (rows were held), and the
    backlog runs one at a time, in priority order, each job once, leaving no ready row."""
    from django_pgqueue.models import Job
    from tests.testapp import jobs

    ids = [
        (p, pk)
        for p in (0, 3, 0)
        for pk in handle.using(priority=p).enqueue_many([(probe_table, "backlog", 0.02)] * 20)
    ]
    expected = [pk for _, pk in sorted(ids, key=lambda item: (-item[0], item[1]))]
    jobs.probe.enqueue_many([(probe_table, "free", 0.02)] * 20)
    proc = start_worker("--threads", "4", env=worker_env())
    try:
        wait_until(held)
        wait_until(lambda: len(runs(probe_table)) == 80, timeout=120)
    finally:
        text = stop(proc)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT job_id FROM {probe_table} WHERE key = 'backlog' ORDER BY started")
        assert [pk for (pk,) in cursor.fetchall()] == expected, text
    by_key = runs_by_key(probe_table)
    assert most_overlapping(by_key["backlog"]) == 1
    assert len(by_key["free"]) == 20
    assert not Job.objects.exclude(status="completed").exists()
    assert ready_rows("queue") == {}


def rows_ever_held() -> int:
    """Rows inserted into the ready ring's held partition so far (the server's statistics: a
    worker's backend reports them by the time it has exited)."""
    from django_pgqueue.sql import ready

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = %s", [ready.HELD_TABLE]
        )
        return int(cursor.fetchone()[0])


def runs(table: str) -> list[tuple[str, float, float]]:
    """The finished runs the ``probe`` jobs recorded in ``table``: (key, started, ended)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, started, ended FROM {table} WHERE ended IS NOT NULL")
        return cursor.fetchall()


def runs_by_key(table: str) -> dict[str, list[tuple[float, float]]]:
    """The finished runs in ``table`` (:func:`runs`) as (started, ended) per key."""
    by_key: dict[str, list[tuple[float, float]]] = {}
    for key, started, ended in runs(table):
        by_key.setdefault(key, []).append((started, ended))
    return by_key


def most_overlapping(intervals: list[tuple[float, float]]) -> int:
    """The most intervals running at one instant (an end before a start at the same time)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def busiest_window(starts: list[float], seconds: float = 1.0) -> int:
    """The most starts in any window of ``seconds`` (half-open)."""
    starts = sorted(starts)
    best = lo = 0
    for hi, t in enumerate(starts):
        while starts[lo] <= t - seconds:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan, depth first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from plan_nodes(child)
