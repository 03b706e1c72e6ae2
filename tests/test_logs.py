"""What the worker logs: one line per attempt a person can act on, with structured fields."""

from __future__ import annotations

import logging
import re
import signal
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings
from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.models import Job, Schedule
from django_pgqueue.models import Worker as WorkerRow
from django_pgqueue.worker import Worker
from django_pgqueue.worker.performer import decide, failed, log_outcome
from tests.testapp import jobs
from tests.utils import output, run_worker, start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def drain(**options: object) -> None:
    Worker(burst=True, worker_id="logs", **options).run()  # type: ignore[arg-type]


def records(caplog: pytest.LogCaptureFixture, **fields: object) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if all(getattr(r, name, None) == value for name, value in fields.items())
    ]


@override_settings(PGQUEUE_BACKOFF_BASE=30, PGQUEUE_BACKOFF_JITTER=0)
def test_a_retry_says_which_attempt_comes_when(caplog):
    caplog.set_level(logging.INFO, logger="django_pgqueue")
    created = jobs.always_fails.enqueue()
    drain()
    (line,) = records(caplog, job_id=created.pk)
    message = line.getMessage()
    assert re.search(
        r"attempt 1/3 failed after [\d.]+ ms \(RuntimeError: boom\); retry 2/3 in 30\.00 s at ",
        message,
    )
    assert (line.levelno, line.exc_info) == (logging.WARNING, None)  # one line, no traceback
    assert (line.outcome, line.attempt, line.queue, line.worker_id) == (
        "retried",
        1,
        "default",
        "logs",
    )
    assert line.duration < 30  # the attempt's own duration, not the wait before the retry


def test_a_last_failure_says_dead_and_a_success_its_duration(caplog):
    caplog.set_level(logging.INFO, logger="django_pgqueue")
    dead = jobs.always_fails.using(max_attempts=1).enqueue()
    fine = jobs.add.enqueue(1, 2)
    drain()
    (dead_line,) = records(caplog, job_id=dead.pk)
    assert dead_line.getMessage().endswith("; now dead")
    assert dead_line.levelno == logging.ERROR
    (fine_line,) = records(caplog, job_id=fine.pk)
    assert re.search(r"attempt 1/5 completed after [\d.]+ ms$", fine_line.getMessage())
    assert fine_line.outcome == "completed"


@override_settings(
    PGQUEUE_BACKOFF_BASE=30, PGQUEUE_RETRY_LOG_LEVEL="info", PGQUEUE_FAILURE_LOG_LEVEL=50
)
def test_the_settings_choose_the_levels_of_a_retried_and_a_dead_failure(caplog):
    caplog.set_level(logging.DEBUG, logger="django_pgqueue")
    retried = jobs.always_fails.enqueue("line\nbreak")
    dead = jobs.always_fails.using(max_attempts=1).enqueue()
    drain()
    (retried_line,) = records(caplog, job_id=retried.pk)
    assert (retried_line.levelno, retried_line.exc_info) == (logging.INFO, None)
    assert "(RuntimeError: line break); retry 2/3" in retried_line.getMessage()
    (dead_line,) = records(caplog, job_id=dead.pk)
    assert dead_line.levelno == logging.CRITICAL and dead_line.exc_info is not None


def test_at_verbosity_zero_a_retried_failure_is_a_warning_line_and_a_dead_one_an_error_with_its_traceback(  # noqa: E501
    tmp_path,
):
    marker = tmp_path / "count"
    flaky = jobs.fails_until.enqueue(str(marker), 2)
    dead = jobs.always_fails.using(max_attempts=1).enqueue("for good")
    env = worker_env(PGQUEUE_BACKOFF_BASE="0", PGQUEUE_TEST_LOG_LEVELS="1")
    quiet = run_worker("-v", "0", env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert Job.objects.get(pk=flaky.pk).status == "completed"
    lines = quiet.stderr.splitlines()
    (retried,) = [line for line in lines if f"#{flaky.pk} " in line]
    assert retried.startswith("WARNING tests.testapp.jobs.fails_until"), quiet.stderr
    assert "attempt 1/5 failed after" in retried
    assert "(ValueError: attempt 1 fails); retry 2/5 in " in retried
    (dead_line,) = [line for line in lines if f"#{dead.pk} " in line]
    assert dead_line.startswith("ERROR tests.testapp.jobs.always_fails"), quiet.stderr
    assert dead_line.endswith("; now dead")
    # The one traceback is the dead job's, right under its line.
    assert quiet.stderr.count("Traceback (most recent call last)") == 1, quiet.stderr
    below = lines[lines.index(dead_line) + 1 :]
    traceback = []
    for line in below:
        if line.split(" ", 1)[0] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            break
        traceback.append(line)
    assert traceback[0] == "Traceback (most recent call last):", quiet.stderr
    assert traceback[-1] == "RuntimeError: for good"


def test_a_job_reclaimed_from_a_dead_worker_is_a_warning_naming_it(caplog):
    caplog.set_level(logging.INFO, logger="django_pgqueue")
    created = jobs.add.enqueue(1, 1)
    Job.objects.claim("gone-worker")
    Job.objects.filter(pk=created.pk).update(locked_at="2000-01-01T00:00:00Z")
    drain()
    warnings = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "reclaimed by logs" in r.getMessage()
    ]
    assert len(warnings) == 1
    assert "worker gone-worker stopped heartbeating" in warnings[0].getMessage()
    assert Job.objects.get(pk=created.pk).status == "completed"


def test_verbosity_two_shows_claims_flushes_and_sleeps_and_zero_only_problems():
    jobs.add.enqueue_many([(1, 1)] * 3)
    verbose = run_worker("-v", "2", env=worker_env())
    assert verbose.returncode == 0, verbose.stderr
    assert "claimed 3 of" in verbose.stderr
    assert "wrote 3 outcomes" in verbose.stderr
    jobs.always_fails.using(max_attempts=1).enqueue()
    jobs.add.enqueue(2, 2)
    quiet = run_worker("-v", "0", env=worker_env())
    assert quiet.returncode == 0, quiet.stderr
    assert "completed after" not in quiet.stderr
    assert "now dead" in quiet.stderr
    # Only warnings and errors: no lifecycle lines either (INFO), no claims (DEBUG).
    for info in ("Supervisor", "started: queues=", "stopped:", "finished", "claimed"):
        assert info not in quiet.stderr


def test_every_lifecycle_line_names_its_worker_or_supervisor():
    jobs.record.enqueue_many([("/dev/null", f"j{i}", 0.2) for i in range(6)])
    proc = start_worker("--processes", "2", "--worker-id", "lc")
    try:
        wait_until(lambda: WorkerRow.objects.filter(stopped_at__isnull=True).count() == 2)
    finally:
        text = stop(proc, signal.SIGTERM)
    assert proc.returncode == 0, text
    names = ("lc.0", "lc.1", f"Supervisor {proc.pid}")
    lifecycle = [line for line in text.splitlines() if " #" not in line]  # not a job's line
    assert len(lifecycle) >= 7, text  # supervisor start, 2 x started/received/stopped...
    for line in lifecycle:
        assert any(name in line for name in names), line
    received = [line for line in lifecycle if "received SIGTERM" in line]
    assert len(received) == 3, text  # the supervisor and each worker, each named
    assert len(set(received)) == 3


def test_an_attempt_line_leaves_out_a_traceback_another_logger_wrote(caplog):
    from django_pgqueue.worker.performer import TRACEBACK_LOGGED

    caplog.set_level(logging.INFO, logger="django_pgqueue")
    plain = jobs.always_fails.using(max_attempts=1).enqueue("plain")
    drain()
    (line,) = records(caplog, job_id=plain.pk)
    assert line.exc_info is not None  # the worker's line carries the traceback...

    caplog.clear()
    error = RuntimeError("told already")
    setattr(error, TRACEBACK_LOGGED, True)
    job = jobs.always_fails.using(max_attempts=1).enqueue()
    job.attempts = 1
    outcome = failed(job, error, timezone.now(), "logs", decide(job))
    log_outcome(job, outcome, "logs")
    (line,) = records(caplog, job_id=job.pk)
    assert line.exc_info is None  # ...unless it was logged already
    assert "(RuntimeError, traceback in the django.tasks log); now dead" in line.getMessage()


def test_verbosity_two_shows_an_idle_worker_sleeping_and_why():
    jobs.add.using(run_after=timedelta(hours=1)).enqueue(1, 1)
    proc = start_worker("-v", "2", "--worker-id", "sleepy")
    try:
        wait_until(lambda: "sleeping up to" in output(proc))
    finally:
        text = stop(proc, signal.SIGTERM)
    assert proc.returncode == 0, text
    assert re.search(r"Worker sleepy: next job due in [\d.]+s; sleeping up to [\d.]+s", text)
    assert "Worker sleepy claimed 0 of" in text


# ----- times in log messages: the project's time zone, with its offset (issue 36) ---------------


@override_settings(TIME_ZONE="Asia/Kolkata", PGQUEUE_BACKOFF_BASE=30, PGQUEUE_BACKOFF_JITTER=0)
def test_a_retry_line_gives_its_time_in_the_project_time_zone_with_its_offset(caplog):
    caplog.set_level(logging.INFO, logger="django_pgqueue")
    created = jobs.always_fails.enqueue()
    drain()
    (line,) = records(caplog, job_id=created.pk)
    run_after = Job.objects.get(pk=created.pk).run_after
    assert run_after is not None
    stamp = run_after.astimezone(ZoneInfo("Asia/Kolkata")).isoformat(" ", "milliseconds")
    assert stamp.endswith("+05:30")
    assert line.getMessage().endswith(f" at {stamp}")


@override_settings(TIME_ZONE="Asia/Kolkata")
def test_a_schedule_enqueue_line_gives_its_ticks_in_the_project_time_zone(caplog):
    caplog.set_level(logging.INFO, logger="django_pgqueue")
    schedule = Schedule(name="tz", job="tests.testapp.jobs.noop", every=60.0)
    schedule.full_clean()
    schedule.save()
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=datetime(2026, 1, 1, 12, tzinfo=UTC))
    fired = operations.fire_schedules(
        operations.DjangoDatabase("default"), now=datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    )
    assert fired.enqueued == 1
    (line,) = [r for r in caplog.records if getattr(r, "schedule", None) == "tz"]
    job_id = Job.objects.get(schedule="tz").pk
    assert line.getMessage() == (
        f"Schedule 'tz' enqueued tests.testapp.jobs.noop #{job_id} "
        "for 2026-01-01 17:30:00.000+05:30"
    )
