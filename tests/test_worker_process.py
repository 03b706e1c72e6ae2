"""``run_jobs`` as real subprocesses: draining, waking, scaling, crashes and shutdown."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue.models import Job
from django_pgqueue.models import Worker as WorkerRow
from tests.testapp import jobs
from tests.utils import (
    other_active_backends,
    run_worker,
    start_worker,
    stop,
    wait_until,
    worker_env,
)
from tests.utils import output as worker_output

pytestmark = pytest.mark.django_db(transaction=True)


def statuses() -> Counter[str]:
    return Counter(Job.objects.values_list("status", flat=True))


def recorded(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    return [(v, int(p)) for v, p in (line.split() for line in path.read_text().splitlines())]


def test_burst_drains_jobs_and_exits_zero():
    jobs.add.enqueue_many([(i, i) for i in range(50)])
    failing = jobs.always_fails.using(max_attempts=2).enqueue()
    result = run_worker()
    assert result.returncode == 0, result.stdout + result.stderr
    assert statuses() == Counter({"completed": 50, "dead": 1})
    assert Job.objects.get(pk=failing.pk).attempts == 2
    # One line per job at INFO, and the failure's traceback.
    assert result.stderr.count("tests.testapp.jobs.add #") == 50
    assert "Traceback (most recent call last)" in result.stderr
    assert "RuntimeError: boom" in result.stderr


def test_a_worker_process_keeps_what_it_inherited_out_of_the_collectors_sight():
    """A full collection no longer walks Django and the project's modules (a pause of the loop
    of 70-85 ms per 50,000 jobs drained): the child freezes what it inherited. A claim's jobs
    no longer start young collections either."""
    from django_pgqueue.worker.supervisor import GC_YOUNG_THRESHOLD

    job = jobs.collector_state.enqueue()
    result = run_worker()
    assert result.returncode == 0, result.stdout + result.stderr
    frozen, threshold = Job.objects.get(pk=job.pk).result
    assert frozen > 10_000
    assert threshold == GC_YOUNG_THRESHOLD


def test_burst_never_waits_for_a_retry_backoff(tmp_path):
    out = tmp_path / "out"
    failing = jobs.always_fails.enqueue()
    jobs.record.enqueue_many([(str(out), f"slow-{i}", 0.5) for i in range(3)])
    # A 10-minute backoff: a worker that waited for it would hit run_worker's deadline.
    result = run_worker("--threads", "1", env=worker_env(PGQUEUE_BACKOFF_BASE="600"))
    assert result.returncode == 0, result.stderr
    row = Job.objects.get(pk=failing.pk)
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.run_after > timezone.now() + timedelta(minutes=9)
    assert "retry 2/3 in 10 min 0 s" in result.stderr
    assert statuses() == Counter({"completed": 3, "pending": 1})


def test_burst_runs_retries_that_are_due_while_it_runs(tmp_path):
    # tests.settings: PGQUEUE_BACKOFF_BASE = 0, so each retry is due at once.
    created = jobs.fails_until.enqueue(str(tmp_path / "count"), 3)
    result = run_worker()
    assert result.returncode == 0, result.stderr
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.attempts, row.result) == ("completed", 3, 3)


def test_quiet_verbosity_drops_the_per_job_lines():
    jobs.add.enqueue(1, 1)
    result = run_worker("-v", "0")
    assert result.returncode == 0
    assert "tests.testapp.jobs.add #" not in result.stderr
    assert statuses() == Counter({"completed": 1})


def test_a_running_worker_picks_up_jobs_enqueued_after_it_started(tmp_path):
    out = tmp_path / "out"
    jobs.record.enqueue(str(out), "before")
    proc = start_worker("--threads", "2")
    try:
        wait_until(lambda: len(recorded(out)) == 1)
        for i in range(20):
            jobs.record.enqueue(str(out), f"after-{i}")
        wait_until(lambda: statuses() == Counter({"completed": 21}))
    finally:
        output = stop(proc)
    assert proc.returncode == 0, output
    assert sorted(v for v, _ in recorded(out)) == sorted(
        ["before", *(f"after-{i}" for i in range(20))]
    )


def test_notify_wakes_an_idle_worker_long_before_the_poll_interval(tmp_path):
    out = tmp_path / "out"
    proc = start_worker(env=worker_env(PGQUEUE_POLL_INTERVAL="600"))
    try:
        # The worker is idle (and listening) once it has registered and polled once.
        wait_until(lambda: WorkerRow.objects.filter(stopped_at__isnull=True).exists())
        time.sleep(0.5)
        jobs.record.enqueue(str(out), "woken")
        # Far inside the 600 s poll interval: only the notification can have woken it.
        wait_until(lambda: recorded(out), timeout=30)
    finally:
        stop(proc)
    assert recorded(out)[0][0] == "woken"


def test_several_processes_run_every_job_exactly_once(tmp_path):
    out = tmp_path / "out"
    jobs.record.enqueue_many([(str(out), f"job-{i}", 0.002) for i in range(400)])
    result = run_worker("--processes", "3", "--batch-size", "10")
    assert result.returncode == 0, result.stderr
    lines = recorded(out)
    assert sorted(v for v, _ in lines) == sorted(f"job-{i}" for i in range(400))
    assert len({pid for _, pid in lines}) > 1, "one process did all the work"
    assert statuses() == Counter({"completed": 400})


@pytest.mark.slow  # long, processes only: once, on the newest Django
def test_sigkill_of_the_whole_worker_loses_no_job(tmp_path):
    out = tmp_path / "out"
    jobs.record.enqueue_many([(str(out), f"job-{i}", 0.02) for i in range(300)])
    env = worker_env(PGQUEUE_VISIBILITY_TIMEOUT="3", PGQUEUE_HEARTBEAT_INTERVAL="0.5")
    proc = start_worker("--processes", "2", "--threads", "2", env=env)
    wait_until(lambda: len(recorded(out)) >= 40)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    # A statement sent just before the kill still commits: read the rows once the killed
    # workers' statements have ended.
    wait_until(lambda: other_active_backends() == 0)
    owned_at_kill = set(Job.objects.filter(status="running").values_list("id", flat=True))
    assert owned_at_kill, "the kill should have caught jobs mid-flight"

    result = run_worker(env=env)  # reclaims after the 3 s visibility timeout
    assert result.returncode == 0, result.stderr
    assert statuses() == Counter({"completed": 300})
    counts = Counter(v for v, _ in recorded(out))
    assert set(counts) == {f"job-{i}" for i in range(300)}
    twice = {v for v, c in counts.items() if c > 1}
    args_of = dict(Job.objects.values_list("id", "args"))
    assert twice <= {args_of[pk][1] for pk in owned_at_kill}, "only claimed jobs may run twice"
    for pk in owned_at_kill:
        assert Job.objects.get(pk=pk).attempts == 2


def test_sigterm_hands_back_unstarted_jobs_and_finishes_running_ones(tmp_path):
    out = tmp_path / "out"
    jobs.record.enqueue_many([(str(out), f"job-{i}", 1.0) for i in range(12)])
    proc = start_worker("--threads", "2", "--batch-size", "10")
    wait_until(lambda: Job.objects.filter(status="running").count() >= 4)
    time.sleep(0.3)  # the first two are inside their 1 s sleep
    output = stop(proc, signal.SIGTERM)
    assert proc.returncode == 0, output
    assert "Handed" in output and "back to the queue" in output
    done = Job.objects.filter(status="completed")
    assert done.count() == len(recorded(out)) >= 2
    pending = Job.objects.filter(status="pending")
    assert pending.count() == 12 - done.count()
    assert set(pending.values_list("attempts", flat=True)) == {0}, "hand-back spends no attempt"
    assert not Job.objects.filter(status="running").exists()


@pytest.mark.slow  # long, processes only: once, on the newest Django
def test_a_second_signal_exits_at_once_and_sets_every_job_right(tmp_path):
    out = tmp_path / "out"
    jobs.record.enqueue_many([(str(out), f"slow-{i}", 30.0) for i in range(4)])
    # One thread: one job runs, the other three are claimed ahead and wait in the process.
    proc = start_worker("--threads", "1", "--batch-size", "10")
    wait_until(lambda: Job.objects.filter(status="running").count() == 4)
    os.killpg(proc.pid, signal.SIGTERM)
    wait_until(lambda: Job.objects.filter(status="running").count() == 1)  # 3 handed back
    running = Job.objects.get(status="running")
    time.sleep(1.5)  # later than the 1 s window in which a repeat counts as the same request
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    text = worker_output(proc)
    assert proc.returncode == 1, text
    assert "second signal, killing workers now" in text
    # Nothing is left running under a dead worker's name, and no pending job names one.
    assert not Job.objects.filter(status="running").exists(), text
    assert not Job.objects.filter(locked_by__isnull=False).exists(), text
    rows = {row.pk: row for row in Job.objects.all()}
    # The running one was interrupted by the shutdown: handed back, its attempt not spent.
    interrupted = [row for row in rows.values() if row.interruptions == 1]
    assert len(interrupted) == 1, rows
    (row,) = interrupted
    assert row.pk == running.pk
    assert row.status == "pending"
    assert row.errors[-1]["exception_class"] == "django_pgqueue.exceptions.JobInterrupted"
    assert "killed by a second signal to run_jobs" in row.errors[-1]["traceback"]
    assert {r.attempts for r in rows.values()} == {0}, "neither spends an attempt"

    # They all run on the next worker.
    Job.objects.update(args=[str(out), "quick", 0.0], run_after=timezone.now())
    result = run_worker()
    assert result.returncode == 0, result.stderr
    assert statuses() == Counter({"completed": 4})
    assert Job.objects.get(pk=row.pk).attempts == 1


def test_terminated_database_connections_do_not_stop_the_worker(tmp_path):
    out = tmp_path / "out"
    proc = start_worker("--threads", "2")
    try:
        jobs.record.enqueue_many([(str(out), f"a-{i}") for i in range(10)])
        wait_until(lambda: statuses() == Counter({"completed": 10}))
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name LIKE 'pgqueue%%' AND pid <> pg_backend_pid() "
                "AND datname = current_database()"
            )
            assert cursor.fetchone()[0] >= 1
        jobs.record.enqueue_many([(str(out), f"b-{i}") for i in range(10)])
        wait_until(lambda: statuses() == Counter({"completed": 20}))
        assert proc.poll() is None, "the worker died"
    finally:
        output = stop(proc)
    assert "unreachable" in output or "reconnecting" in output
    assert len(recorded(out)) == 20


@pytest.mark.slow  # long, processes only: once, on the newest Django
def test_a_heartbeat_keeps_a_long_job_from_running_twice(tmp_path):
    out = tmp_path / "out"
    env = worker_env(PGQUEUE_VISIBILITY_TIMEOUT="1.5", PGQUEUE_HEARTBEAT_INTERVAL="0.3")
    created = jobs.record.enqueue(str(out), "long", 5.0)
    first = start_worker(env=env)
    wait_until(lambda: Job.objects.filter(status="running").exists())
    second = start_worker(env=env)  # would reclaim it if the lock went stale
    try:
        wait_until(lambda: Job.objects.get(pk=created.pk).status == "completed", timeout=60)
    finally:
        stop(first)
        stop(second)
    assert [v for v, _ in recorded(out)] == ["long"]
    assert Job.objects.get(pk=created.pk).attempts == 1


def test_the_supervisor_restarts_a_child_killed_with_sigkill(tmp_path):
    out = tmp_path / "out"
    proc = start_worker("--processes", "2")
    try:
        live = lambda: set(  # noqa: E731
            WorkerRow.objects.filter(stopped_at__isnull=True).values_list("pid", flat=True)
        )
        children = wait_until(lambda: live() if len(live()) == 2 else None)
        victim = min(children)
        os.kill(victim, signal.SIGKILL)
        replaced = wait_until(lambda: live() - {victim} if len(live() - {victim}) == 2 else None)
        assert victim not in replaced
        jobs.record.enqueue_many([(str(out), f"j-{i}") for i in range(30)])
        wait_until(lambda: statuses() == Counter({"completed": 30}))
    finally:
        output = stop(proc)
    assert proc.returncode == 0, output
    assert f"Worker process {victim} died (signal 9)" in output


@pytest.mark.slow  # long, processes only: once, on the newest Django
def test_a_hung_job_fails_on_its_timeout_and_the_worker_carries_on(tmp_path):
    out = tmp_path / "out"
    hung = jobs.hangs.enqueue(30.0)
    jobs.record.enqueue_many([(str(out), f"after-{i}") for i in range(5)])
    # One thread: only a replacement thread can run the other jobs.
    result = run_worker("--threads", "1", timeout=120)
    assert result.returncode == 0, result.stderr
    row = Job.objects.get(pk=hung.pk)
    assert (row.status, row.attempts) == ("dead", 2)
    assert "django_pgqueue.exceptions.JobTimeout" in [e["exception_class"] for e in row.errors]
    assert "ran longer than its 1s timeout" in row.last_error
    assert len(recorded(out)) == 5


def test_two_processes_under_one_worker_id_are_reported_a_restart_under_it_is_not():
    """A worker id names one running process: recovering a dead process's jobs and handing
    back the jobs of a lost claim answer go by it. A restart under the same id takes the row
    over quietly; two processes running under one id say so."""
    env = worker_env(PGQUEUE_HEARTBEAT_INTERVAL="0.2")
    pids = []
    for _ in range(2):
        result = run_worker("--worker-id", "solo", env=env)
        assert result.returncode == 0, result.stderr
        assert "under this worker id too" not in result.stdout + result.stderr
        pids.append(WorkerRow.objects.get(worker_id="solo").pid)
    assert pids[0] != pids[1], "the second run took the row over"
    twins = [start_worker("--worker-id", "twin", env=env) for _ in range(2)]
    try:
        wait_until(
            lambda: any("runs under this worker id too" in worker_output(p) for p in twins),
            timeout=60,
        )
    finally:
        logs = [stop(p) for p in twins]
    assert [p.returncode for p in twins] == [0, 0], logs
    assert "give each run_jobs its own --worker-id" in "".join(logs)


def test_max_jobs_exits_after_that_many_jobs():
    jobs.noop.enqueue_many([()] * 20)
    proc = start_worker("--max-jobs", "5")
    proc.wait(timeout=60)
    assert proc.returncode == 0, worker_output(proc)
    assert statuses() == Counter({"completed": 5, "pending": 15})


def test_pgbouncer_mode_polls_without_listen_or_prepared_statements(tmp_path):
    out = tmp_path / "out"
    env = worker_env(
        PGQUEUE_LISTEN="0", PGQUEUE_PREPARED_STATEMENTS="0", PGQUEUE_POLL_INTERVAL="0.2"
    )
    proc = start_worker(env=env)
    try:
        wait_until(lambda: WorkerRow.objects.filter(stopped_at__isnull=True).exists())
        jobs.record.enqueue(str(out), "polled")
        wait_until(lambda: recorded(out))
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE "
                "'pgqueue listener%%' AND datname = current_database()"
            )
            assert cursor.fetchone()[0] == 0, "no LISTEN connection in poll-only mode"
    finally:
        stop(proc)


def test_an_idle_worker_sleeps_until_the_next_scheduled_job(tmp_path):
    out = tmp_path / "out"
    proc = start_worker(env=worker_env(PGQUEUE_POLL_INTERVAL="600"))
    try:
        wait_until(lambda: WorkerRow.objects.filter(stopped_at__isnull=True).exists())
        # Its NOTIFY arrives while it is not runnable yet; no poll comes for 600 s.
        scheduled = jobs.record.using(run_after=timedelta(seconds=1.5)).enqueue(str(out), "later")
        wait_until(lambda: recorded(out), timeout=30)
        row = Job.objects.get(pk=scheduled.pk)
        assert row.started_at >= row.run_after
    finally:
        stop(proc)


def listener_backends() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'pgqueue listener%%' "
            "AND datname = current_database() AND query LIKE 'LISTEN%%'"
        )
        return [pid for (pid,) in cursor.fetchall()]


def completed(created: Job) -> None:
    """Until ``created`` has run and its outcome is written (a deadline against hangs)."""
    wait_until(lambda: Job.objects.get(pk=created.pk).status == "completed", timeout=30)


def test_the_loop_wakes_on_its_listener_socket_and_a_lost_listener_listens_again(tmp_path):
    # No poll and no heartbeat for ten minutes: a NOTIFY on the listener's socket is the only
    # thing that makes the loop claim, and a job's outcome (an event from its thread) the only
    # thing that makes it write it.
    out = tmp_path / "out"
    env = worker_env(
        PGQUEUE_POLL_INTERVAL="600",
        PGQUEUE_VISIBILITY_TIMEOUT="3600",
        PGQUEUE_HEARTBEAT_INTERVAL="600",
    )
    proc = start_worker(env=env)
    try:
        (first_listener,) = wait_until(listener_backends)
        # Past the worker's look at start: the jobs below are claimed because of their NOTIFY.
        wait_until(lambda: WorkerRow.objects.filter(stopped_at__isnull=True).exists())
        for value in ("one", "two"):
            completed(jobs.record.enqueue(str(out), value))
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [first_listener])
        wait_until(lambda: "listener listening again" in worker_output(proc), timeout=60)
        assert "listener lost its connection" in worker_output(proc)
        assert wait_until(listener_backends) != [first_listener]
        completed(jobs.record.enqueue(str(out), "three"))
    finally:
        log = stop(proc)  # the signal, too, ends a wait on the socket
    assert proc.returncode == 0, log
    assert [value for value, _ in recorded(out)] == ["one", "two", "three"]
