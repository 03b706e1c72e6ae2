"""What a job or a row can do to a worker, tried with real ``run_jobs`` subprocesses.

One test per fault of issue 11 (jobs and rows; the database outages are in
``test_faults_db.py``). Each runs the faulty job among healthy ones in the same run and checks
three things: every healthy job completed exactly once (each appends its value to a file), the
faulty job ended in a final state with its real error recorded, and the worker is still alive
(or ``--burst`` exited by itself). ``docs/reliability.md`` lists the faults and these tests.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue.models import Job
from tests.testapp import jobs
from tests.utils import pid_alive, run_worker, start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

#: Healthy jobs enqueued before and after each faulty one, so they share its batch.
HEALTHY = 10
INT_MAX = 2**31 - 1


def recorded(path: Path) -> Counter[str]:
    """How many times each healthy job ran (``record`` appends "value pid" lines)."""
    if not path.exists():
        return Counter()
    return Counter(line.split()[0] for line in path.read_text().splitlines())


def enqueue_around(out: Path, enqueue_faulty, count: int = HEALTHY):
    """``count`` healthy jobs, the faulty one (enqueued by ``enqueue_faulty()``), ``count`` more.

    Returns the faulty job's id and the values the healthy jobs record.
    """
    values = [f"ok-{i}" for i in range(2 * count)]
    jobs.record.enqueue_many([(str(out), v) for v in values[:count]])
    faulty = enqueue_faulty()
    jobs.record.enqueue_many([(str(out), v) for v in values[count:]])
    return faulty if isinstance(faulty, int) else faulty.pk, values


def assert_healthy_ran_once(out: Path, values: list[str]) -> None:
    assert recorded(out) == Counter(values), "every healthy job runs exactly once"
    healthy = Job.objects.filter(name=jobs.record.name)
    assert set(healthy.values_list("status", "attempts")) == {("completed", 1)}


def burst(*args: str, env: dict[str, str] | None = None) -> str:
    """``run_jobs --burst ARGS``: it must exit by itself, with status 0; returns its log."""
    result = run_worker(*args, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-5000:]
    return result.stderr


def error_classes(row: Job) -> list[str]:
    return [entry["exception_class"] for entry in row.errors]


# ----- return values and error texts PostgreSQL cannot store -------------------------------------


@pytest.mark.parametrize(
    ("func", "message"),
    [
        (jobs.returns_nul, "it holds a NUL character or a lone surrogate"),
        (jobs.returns_lone_surrogate, "it holds a NUL character or a lone surrogate"),
        (jobs.returns_over_jsonb_limit, "bytes, over the 67,108,864 stored"),
        (jobs.returns_nan, "float is not JSON: Out of range float values"),
        (jobs.returns_too_deep, "list is not JSON: maximum recursion depth exceeded"),
    ],
    ids=["nul", "lone-surrogate", "over-256MB", "nan", "100000-levels"],
)
def test_a_result_postgresql_cannot_store_fails_that_job_alone(tmp_path, func, message):
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, func.enqueue)
    log = burst("--threads", "2")
    assert_healthy_ran_once(out, values)
    row = Job.objects.get(pk=faulty)
    # Not retried: the job did its work; running it again would do it twice.
    assert (row.status, row.attempts) == ("dead", 1)
    assert error_classes(row) == ["django_pgqueue.exceptions.ResultNotStorable"]
    assert "its return value cannot be stored as its result" in row.last_error
    assert message in row.last_error
    assert row.result is None
    assert "unreachable" not in log


def test_an_error_message_with_a_nul_and_a_lone_surrogate_is_recorded_escaped(tmp_path):
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, jobs.raises_with_nul.enqueue)
    log = burst("--threads", "2")
    assert_healthy_ran_once(out, values)
    row = Job.objects.get(pk=faulty)
    assert (row.status, row.attempts) == ("dead", 2)  # retried like any failure
    assert error_classes(row) == ["builtins.ValueError"] * 2
    assert "ValueError: bad byte \\x00 and a lone \\ud800 in the message" in row.last_error
    assert "Traceback (most recent call last)" in row.last_error
    assert "unreachable" not in log


def test_a_100_mb_error_message_is_stored_cut_in_the_middle(tmp_path):
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, jobs.raises_huge_message.enqueue)
    burst("--threads", "1")
    assert_healthy_ran_once(out, values)
    row = Job.objects.get(pk=faulty)
    assert (row.status, row.attempts) == ("dead", 2)
    assert len(row.last_error) < 70_000
    assert "characters cut ...]" in row.last_error
    assert row.last_error.startswith("Traceback (most recent call last)")
    assert row.last_error.rstrip().endswith("xxxx")


def test_an_exception_whose_str_raises_is_recorded(tmp_path):
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, jobs.raises_unprintable.enqueue)
    burst("--threads", "1")
    assert_healthy_ran_once(out, values)
    row = Job.objects.get(pk=faulty)
    assert (row.status, row.attempts) == ("dead", 2)
    assert error_classes(row) == ["tests.testapp.jobs.Unprintable"] * 2
    assert "Unprintable: <exception str() failed>" in row.last_error


# ----- BaseExceptions: the executor thread survives them ----------------------------------------


@pytest.mark.parametrize(
    ("func", "exception_class", "text"),
    [
        (jobs.calls_sys_exit, "builtins.SystemExit", "SystemExit: 3"),
        (jobs.raises_keyboard_interrupt, "builtins.KeyboardInterrupt", "KeyboardInterrupt: from"),
        (jobs.raises_base_exception, "tests.testapp.jobs.Halt", "Halt: a BaseException subclass"),
    ],
    ids=["sys.exit", "KeyboardInterrupt", "BaseException"],
)
def test_a_base_exception_fails_the_job_and_the_thread_runs_the_next(
    tmp_path, func, exception_class, text
):
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, func.enqueue)
    # One thread: the jobs after the faulty one run on the thread it ran on.
    log = burst("--threads", "1")
    assert_healthy_ran_once(out, values)
    row = Job.objects.get(pk=faulty)
    assert (row.status, row.attempts) == ("dead", 2)
    assert error_classes(row) == [exception_class] * 2
    assert text in row.last_error
    assert "Executor thread" not in log, "the thread must not die"


# ----- errors in our own code around the job, and settings ----------------------------------------


def test_receivers_that_raise_around_a_job_fail_neither_the_job_nor_the_thread(tmp_path):
    """job_started raises RuntimeError and job_finished SystemExit (tests/testapp/jobs.py)."""
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, jobs.always_fails.using(max_attempts=2).enqueue)
    log = burst("--threads", "1", env=worker_env(PGQUEUE_TEST_BROKEN_RECEIVERS="1"))
    assert_healthy_ran_once(out, values)
    row = Job.objects.get(pk=faulty)
    assert (row.status, row.attempts) == ("dead", 2)
    assert error_classes(row) == ["builtins.RuntimeError"] * 2, "the job's own error"
    assert "Signal receiver" in log and "broken_started" in log
    assert "A signal receiver raised" in log and "a job_finished receiver that exits" in log
    assert "Executor thread" not in log


def test_backoff_settings_at_the_ends_of_their_ranges_keep_the_maths_finite(tmp_path):
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, jobs.always_fails.enqueue)
    century = str(100 * 365 * 86400)
    env = worker_env(
        PGQUEUE_BACKOFF_BASE=century, PGQUEUE_BACKOFF_MAX=century, PGQUEUE_BACKOFF_JITTER="10"
    )
    burst("--threads", "1", env=env)
    assert_healthy_ran_once(out, values)
    row = Job.objects.get(pk=faulty)
    # Retried in 100 years (the cap), not an overflow.
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.run_after > timezone.now() + timedelta(days=99 * 365)
    assert error_classes(row) == ["builtins.RuntimeError"]


@pytest.mark.parametrize(
    ("name", "value"),
    [("BACKOFF_JITTER", "nan"), ("BACKOFF_BASE", "inf"), ("BACKOFF_MAX", "-1")],
)
def test_settings_that_would_break_the_backoff_maths_are_refused_at_start(name, value):
    created = jobs.always_fails.enqueue()
    result = run_worker(env=worker_env(**{f"PGQUEUE_{name}": value}), timeout=120)
    assert result.returncode != 0
    assert "django_pgqueue.E003" in result.stderr
    assert f"PGQUEUE_{name} = " in result.stderr
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.attempts) == ("pending", 0), "nothing was claimed"


def test_an_exception_in_the_executor_around_a_job_neither_kills_the_thread_nor_loses_the_job(
    tmp_path,
):
    """The exception lands in the executor's own code just after it took the next job from its
    queue, before running it: that job must still run, exactly once, without losing an
    attempt."""
    out, marker = tmp_path / "out", tmp_path / "fired"
    jobs.interrupts_its_thread.enqueue(str(marker))
    proc = start_worker("--threads", "1")
    try:
        wait_until(marker.exists)  # the exception waits in the idle thread
        values = [f"ok-{i}" for i in range(10)]
        jobs.record.enqueue_many([(str(out), v) for v in values])
        wait_until(
            lambda: Job.objects.filter(name=jobs.record.name, status="completed").count() == 10
        )
        assert proc.poll() is None
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_healthy_ran_once(out, values)
    assert "error in the executor around job" in log


# ----- a transaction left open ------------------------------------------------------------------


@pytest.fixture
def writes_table():
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {jobs.WRITES_TABLE}")
        cursor.execute(f"CREATE TABLE {jobs.WRITES_TABLE} (tag text NOT NULL)")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {jobs.WRITES_TABLE}")


def written_tags() -> Counter[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tag FROM {jobs.WRITES_TABLE}")
        return Counter(tag for (tag,) in cursor.fetchall())


@pytest.mark.parametrize(
    "func", [jobs.leaves_transaction_open, jobs.leaves_autocommit_off], ids=["atomic", "autocommit"]
)
def test_a_transaction_left_open_is_rolled_back_and_the_next_db_job_works(
    tmp_path, writes_table, func
):
    out = tmp_path / "out"
    before = jobs.writes_row.enqueue("before")
    faulty, values = enqueue_around(out, lambda: func.enqueue("leaked"))
    after = [jobs.writes_row.enqueue(f"after-{i}") for i in range(3)]
    # One thread: the jobs after it use the very connection the faulty job left in a transaction.
    log = burst("--threads", "1")
    assert_healthy_ran_once(out, values)
    row = Job.objects.get(pk=faulty)
    assert (row.status, row.attempts) == ("dead", 2)
    assert error_classes(row) == ["django_pgqueue.exceptions.TransactionLeftOpen"] * 2
    assert "returned with a transaction still open on database default" in row.last_error
    assert "its writes there were rolled back" in row.last_error
    # Really rolled back; the jobs on the same thread before and after it wrote and committed.
    assert written_tags() == Counter(["before", "after-0", "after-1", "after-2"])
    for created in [before, *after]:
        done = Job.objects.get(pk=created.pk)
        assert (done.status, done.attempts) == ("completed", 1), done.last_error
    assert "connection is closed" not in log


# ----- poison rows, written with raw SQL ----------------------------------------------------------


def insert_row(name: str, args: str = "[]", kwargs: str = "{}", **columns: object) -> int:
    """A job row written by hand (another program, a bad migration...): jsonb as JSON text."""
    names = ["name", "args", "kwargs", *columns]
    values = ["%s", "%s::jsonb", "%s::jsonb", *(["%s"] * len(columns))]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO pgqueue_job ({', '.join(names)}) VALUES ({', '.join(values)}) "
            "RETURNING id",
            [name, args, kwargs, *columns.values()],
        )
        return int(cursor.fetchone()[0])


NESTED = "[" * 11_000 + "]" * 11_000
POISON = "django_pgqueue.exceptions.PoisonJob"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"args": "[" + "9" * 5001 + "]"}, "its args cannot be decoded: ValueError: Exceeds"),
        ({"args": f"[1, {NESTED}]"}, "its args cannot be decoded: RecursionError"),
        ({"kwargs": '{"a": ' + NESTED + "}"}, "its kwargs cannot be decoded: RecursionError"),
        ({"args": '{"a": 1, "b": 2}'}, "its args are a JSON dict, not a list"),
        ({"args": '"1, 2"'}, "its args are a JSON str, not a list"),
        ({"args": "[]", "kwargs": "[1, 2]"}, "its kwargs are a JSON list, not an object"),
        ({"attempts": INT_MAX}, "its attempts counter is at the integer limit"),
        ({"attempts": INT_MAX - 1}, "its attempts counter is at the integer limit"),
    ],
    ids=[
        "5001-digits",
        "11000-levels-args",
        "11000-levels-kwargs",
        "args-object",
        "args-string",
        "kwargs-list",
        "attempts-at-limit",
        "attempts-reaching-limit",
    ],
)
def test_a_poison_row_fails_alone_without_touching_its_batch(tmp_path, row, message):
    out = tmp_path / "out"
    row = {"args": "[1, 2]", **row}
    faulty, values = enqueue_around(out, lambda: insert_row(jobs.add.name, **row))
    # One claim takes the whole batch, the poison row in the middle of it.
    log = burst("--threads", "2", "--batch-size", "100")
    assert_healthy_ran_once(out, values)
    job = Job.objects.get(pk=faulty)
    assert job.status == "dead"
    assert error_classes(job) == [POISON], "failed once, without running, never retried"
    assert f"Job 'tests.testapp.jobs.add' #{faulty} cannot be run as stored" in job.last_error
    assert message in job.last_error
    assert "Worker loop error" not in log and "Queue database error" not in log


def test_an_unknown_job_name_fails_that_job_with_retries(tmp_path):
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, lambda: insert_row("tests.nowhere.gone", max_attempts=3))
    burst("--threads", "2")
    assert_healthy_ran_once(out, values)
    job = Job.objects.get(pk=faulty)
    # Retried: a newer deploy of the workers may know the name.
    assert (job.status, job.attempts) == ("dead", 3)
    assert error_classes(job) == ["django_pgqueue.exceptions.UnknownJob"] * 3
    assert "No job named 'tests.nowhere.gone' is registered in this worker" in job.last_error


def test_a_row_running_without_a_lock_is_taken_back_like_any_stale_job(tmp_path):
    """A ``running`` row no worker ever locked (``locked_at`` NULL, written by hand) used to
    stay running forever: no heartbeat could go stale."""
    out = tmp_path / "out"
    faulty, values = enqueue_around(
        out, lambda: insert_row(jobs.add.name, "[1, 2]", status="running", attempts=1)
    )
    burst("--threads", "2")
    assert_healthy_ran_once(out, values)
    job = Job.objects.get(pk=faulty)
    assert (job.status, job.attempts, job.result) == ("completed", 2, 3)
    assert error_classes(job) == ["django_pgqueue.exceptions.WorkerLost"]
    assert "never locked" in job.last_error


def test_a_stale_job_is_taken_back_while_a_backlog_fills_every_claim(tmp_path):
    """Stale-job recovery runs after each second's claim, with its own limit: a backlog that
    fills every claim does not keep a dead worker's job waiting until it drains."""
    out = tmp_path / "out"
    values = [f"ok-{i}" for i in range(200)]
    jobs.record.enqueue_many([(str(out), v, 0.005) for v in values])
    stale = insert_row(
        jobs.add.name,
        "[1, 2]",
        status="running",
        attempts=1,
        locked_by="gone",
        locked_at=timezone.now() - timedelta(hours=1),
    )
    burst("--threads", "1")
    assert_healthy_ran_once(out, values)
    job = Job.objects.get(pk=stale)
    assert (job.status, job.attempts, job.result) == ("completed", 2, 3)
    after = Job.objects.filter(name=jobs.record.name, finished_at__gt=job.finished_at).count()
    assert after >= 100, f"taken back only after {200 - after} of the backlog's 200 jobs"


def test_arguments_that_do_not_fit_the_signature_fail_that_job(tmp_path):
    out = tmp_path / "out"
    faulty, values = enqueue_around(
        out, lambda: insert_row(jobs.add.name, "[1, 2, 3]", '{"": 1}', max_attempts=2)
    )
    burst("--threads", "2")
    assert_healthy_ran_once(out, values)
    job = Job.objects.get(pk=faulty)
    assert (job.status, job.attempts) == ("dead", 2)
    assert error_classes(job) == ["builtins.TypeError"] * 2
    assert "add() got an unexpected keyword argument ''" in job.last_error


@pytest.mark.parametrize(
    "errors",
    ['{"x": 1}', '"a string"', "[1, 2]", "null"],
    ids=["object", "string", "list-of-numbers", "null"],
)
def test_a_malformed_error_history_does_not_stop_the_job(tmp_path, errors):
    """``errors`` is only history: a job whose history is malformed still runs (and reclaims of
    it still work)."""
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, lambda: insert_row(jobs.add.name, "[1, 2]", errors=errors))
    log = burst("--threads", "2")
    assert_healthy_ran_once(out, values)
    job = Job.objects.get(pk=faulty)
    assert (job.status, job.attempts, job.result) == ("completed", 1, 3)
    assert "Worker loop error" not in log


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("run_after", "-infinity"),
        ("created_at", "infinity"),
        ("run_after", "0044-03-15 12:00:00+00 BC"),
        ("created_at", "12345-01-01 00:00:00+00"),
    ],
    ids=["run-after-minus-infinity", "created-infinity", "bc", "year-12345"],
)
def test_a_timestamp_python_cannot_hold_does_not_block_the_claim(tmp_path, column, value):
    """PostgreSQL's timestamps go from 4713 BC to 294276 AD and to +-infinity; Python's
    datetime from 1 to 9999. A runnable row with such a timestamp runs like any other."""
    out = tmp_path / "out"
    faulty, values = enqueue_around(
        out, lambda: insert_row(jobs.add.name, "[1, 2]", **{column: value})
    )
    log = burst("--threads", "2")
    assert_healthy_ran_once(out, values)
    job = Job.objects.filter(pk=faulty).values_list("status", "attempts", "result").get()
    assert job == ("completed", 1, 3)
    assert "Worker loop error" not in log and "Queue database error" not in log


# ----- jobs that kill their process -------------------------------------------------------------


CRASHERS = pytest.mark.parametrize(
    ("func", "how"),
    [
        (jobs.exits_process, "status 1"),
        (jobs.segfaults, "signal 11"),
        (jobs.kills_own_process, "signal 9"),
    ],
    ids=["os._exit", "segfault", "sigkill"],
)
CRASHED = "django_pgqueue.exceptions.WorkerCrashed"


def assert_crashed_alone(job_id: int, attempts: int, how: str) -> None:
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.attempts) == ("dead", attempts)
    assert error_classes(row) == [CRASHED] * attempts, "charged once per crash, never lost"
    assert f"died ({how}) while running job '{row.name}' #{row.pk}" in row.last_error


@CRASHERS
def test_a_job_that_kills_its_process_never_stops_run_jobs(tmp_path, func, how):
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, func.enqueue)
    proc = start_worker()  # the default: --processes 1, --threads 1
    try:
        wait_until(
            lambda: Job.objects.filter(status__in=["completed", "dead"]).count() == len(values) + 1,
            timeout=120,
        )
        assert proc.poll() is None, "run_jobs must not exit"
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_healthy_ran_once(out, values)
    assert_crashed_alone(faulty, 3, how)
    # Restarted with growing delays, one restart per crash.
    assert len(re.findall(rf"Worker process \d+ died \({how}\)", log)) == 3
    assert "restarting in 0.5s" in log and "restarting in 1.0s" in log
    assert "restarting in 2.0s" in log


def test_burst_exits_by_itself_after_a_crash_loop(tmp_path):
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, jobs.kills_own_process.enqueue)
    result = run_worker(timeout=300)
    # Every job done; the status says a worker process died on the way.
    assert result.returncode == 1, result.stderr[-5000:]
    assert_healthy_ran_once(out, values)
    assert_crashed_alone(faulty, 3, "signal 9")


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_crash_loop_among_forty_healthy_jobs_charges_only_the_crasher(tmp_path, processes):
    out = tmp_path / "out"
    values = [f"ok-{i}" for i in range(40)]
    jobs.record.enqueue_many([(str(out), v, 0.05) for v in values[:20]])
    crasher = jobs.kills_own_process.using(max_attempts=4).enqueue()
    jobs.record.enqueue_many([(str(out), v, 0.05) for v in values[20:]])
    env = worker_env(PGQUEUE_VISIBILITY_TIMEOUT="3")
    proc = start_worker("--processes", processes, env=env)
    try:
        wait_until(
            lambda: Job.objects.filter(status__in=["completed", "dead"]).count() == 41,
            timeout=180,
        )
        assert proc.poll() is None, "run_jobs must not exit"
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_healthy_ran_once(out, values)  # none charged an attempt, none dead
    assert_crashed_alone(crasher.pk, 4, "signal 9")
    assert "WorkerLost" not in log, "every crash is recovered by the supervisor, not by expiry"


# ----- a job that forks ------------------------------------------------------------------------


def _in_process_group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, read from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(stat.parent.name))
    return pids


@pytest.mark.parametrize(("child", "status"), [("exit", 0), ("raise", 1), ("return", 0)])
def test_a_job_whose_forked_child_exits_completes_once_and_leaves_no_ghost(tmp_path, child, status):
    """Issue 36: the child of a job's ``os.fork()`` returned into the worker, logged the job
    failed, and lived on as a ghost worker thread the parent's ``waitpid`` waited for."""
    pid_file = tmp_path / "child-pid"
    out = tmp_path / "out"
    faulty, values = enqueue_around(out, lambda: jobs.forks.enqueue(str(pid_file), child), 3)
    proc = start_worker("--threads", "1")
    try:
        wait_until(
            lambda: Job.objects.filter(status="completed").count() == len(values) + 1,
            timeout=60,
        )
    finally:
        log = stop(proc)
        try:
            wait_until(lambda: _in_process_group(proc.pid) == [], timeout=10)
        finally:
            for ghost in _in_process_group(proc.pid):  # never leave one for later tests
                with contextlib.suppress(ProcessLookupError):
                    os.kill(ghost, signal.SIGKILL)
    assert proc.returncode == 0, log
    assert_healthy_ran_once(out, values)
    row = Job.objects.get(pk=faulty)
    assert (row.status, row.attempts, row.result) == ("completed", 1, status)
    assert len(re.findall(rf"forks #{faulty} .* completed", log)) == 1, log
    assert not re.search(rf"forks #{faulty} .* failed", log), "the child logs nothing"
    child_pid = int(pid_file.read_text())
    wait_until(lambda: not pid_alive(child_pid), timeout=10)
