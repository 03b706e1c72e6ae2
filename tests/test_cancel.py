"""Cancelling running jobs, ``current_job()`` and progress: the rows, and real workers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import CurrentJob, current_job, operations
from django_pgqueue.models import Job
from django_pgqueue.operations import Outcome
from django_pgqueue.states import Attempt, JobStatus
from django_pgqueue.testing import run_jobs
from tests.testapp import jobs
from tests.utils import start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def fetch(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def claimed(job: Job, worker: str = "w1") -> Job:
    (row,) = Job.objects.claim(worker)
    assert row.pk == job.pk
    return fetch(row)


# ----- the rows ----------------------------------------------------------------------------


def test_cancel_of_a_pending_job_is_at_once_and_of_a_finished_one_does_nothing():
    pending = jobs.add.enqueue(1, 2)
    assert pending.cancel() is True
    assert (pending.status, pending.cancel_requested_at) == (JobStatus.CANCELLED, None)
    assert pending.cancel() is False  # finished now
    assert fetch(pending).status == JobStatus.CANCELLED


def test_cancel_of_a_running_job_asks_it_to_stop_and_tells_the_workers():
    created = jobs.add.enqueue(1, 2)
    row = claimed(created)
    with connection.cursor() as cursor:
        cursor.execute("LISTEN pgqueue_control")
    assert row.cancel() is True
    assert row.status == JobStatus.RUNNING and row.cancel_requested_at is not None
    assert row.cancel() is False  # asked once
    raw = connection.connection
    notifies = list(raw.notifies(timeout=2, stop_after=1))
    assert [(n.channel, n.payload) for n in notifies] == [("pgqueue_control", "cancel")]
    assert operations.cancel_requested(operations.DjangoDatabase("default"), "w1", [row.pk]) == {
        row.pk
    }
    owned, asked = operations.heartbeat(operations.DjangoDatabase("default"), "w1", [row])
    assert owned == asked == {row.pk}


@pytest.mark.parametrize(
    "status,outcome",
    [(JobStatus.PENDING, Attempt.RETRIED), (JobStatus.COMPLETED, Attempt.COMPLETED)],
)
def test_whatever_the_attempt_returns_a_job_asked_to_stop_ends_cancelled(status, outcome):
    row = claimed(jobs.always_fails.enqueue())
    row.cancel()
    now = timezone.now()
    result = Outcome(
        row.pk,
        status,
        now,
        None if status == JobStatus.PENDING else now,
        run_after=now,
        outcome=outcome,
        claim_token=row.claim_token,
    )
    db = operations.DjangoDatabase("default")
    assert operations.finish(db, "w1", [result], delete_completed=False) == {row.pk}
    row = fetch(row)
    assert (row.status, row.attempts) == (JobStatus.CANCELLED, 1)
    assert row.finished_at is not None
    assert Job.objects.claim("w2") == []  # never retried


def test_a_cancelled_job_handed_back_or_reclaimed_is_cancelled_not_run_again():
    handed = claimed(jobs.add.enqueue(1, 2))
    handed.cancel()
    assert operations.release(operations.DjangoDatabase("default"), "w1", [handed]) == {handed.pk}
    assert fetch(handed).status == JobStatus.CANCELLED

    stale = claimed(jobs.add.enqueue(3, 4))
    stale.cancel()
    Job.objects.filter(pk=stale.pk).update(locked_at=timezone.now() - timedelta(hours=1))
    assert Job.objects.claim("w2") == []
    stale = fetch(stale)
    assert stale.status == JobStatus.CANCELLED
    assert "WorkerLost" in stale.last_error


def test_retrying_a_cancelled_job_clears_the_request_and_its_progress():
    row = claimed(jobs.add.enqueue(1, 2))
    row.cancel()
    operations.save_progress(operations.DjangoDatabase("default"), "w1", {row.pk: '{"done":1}'})
    assert fetch(row).progress == {"done": 1}
    operations.release(operations.DjangoDatabase("default"), "w1", [row])
    assert fetch(row).retry() is True
    row = fetch(row)
    assert (row.status, row.cancel_requested_at, row.progress) == (JobStatus.PENDING, None, None)


def test_a_job_function_called_directly_has_a_standalone_current_job():
    assert jobs.reports_itself(3) == {
        "id": None,
        "name": "tests.testapp.jobs.reports_itself",
        "queue": "emails",
        "attempt": 1,
        "max_attempts": 4,
        "claimed": False,
        "cancel_requested": False,
        "done": 3,
        "progress": {"done": 3, "total": 3, "message": "step 3"},
        "same": True,  # one context for the whole call
    }
    assert jobs.reports_itself(1)["progress"] == {"done": 1, "total": 1, "message": "step 1"}


def test_current_job_outside_any_job_function_is_a_standalone_context():
    me = current_job()
    assert (me.id, me.name, me.attempt, me.claimed_at, me.cancel_requested) == (
        None,
        "",
        1,
        None,
        False,
    )
    me.set_progress(1, 2, "half")  # kept in memory only
    assert me.progress == {"done": 1, "total": 2, "message": "half"}
    me.request_cancel()  # what a test can do to exercise a job's stop path
    assert me.cancel_requested
    assert "outside a worker" in repr(me)


def test_run_jobs_binds_the_attempt_to_current_job():
    created = jobs.reports_itself.enqueue(2)
    ran = run_jobs()
    result = ran[0].result
    assert (result["id"], result["attempt"], result["queue"]) == (created.pk, 1, "emails")
    assert result["claimed"] is True and result["cancel_requested"] is False


def test_bad_progress_says_what_is_wrong():
    me = CurrentJob(Job(pk=1, name="x", queue="q", attempts=1, max_attempts=3))
    with pytest.raises(TypeError, match="done must be a number"):
        me.set_progress("half")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="total must be finite"):
        me.set_progress(1, float("nan"))
    with pytest.raises(ValueError, match="NULs or lone surrogates"):
        me.set_progress(1, 2, "a\x00b")
    me.set_progress(1, 2, "half")
    assert me.take_progress() == '{"done":1,"total":2,"message":"half"}'
    assert me.take_progress() is None  # written once


# ----- real workers ------------------------------------------------------------------------


@pytest.mark.slow  # long, processes only: once, on the newest Django
@pytest.mark.parametrize("listen", ["1", "0"], ids=["notify", "polling"])
@pytest.mark.parametrize("fail", [False, True], ids=["returns", "raises"])
def test_a_running_job_that_checks_cancel_requested_stops_and_ends_cancelled(
    tmp_path: Path, listen: str, fail: bool
):
    marker = tmp_path / "marker"
    created = jobs.until_cancelled.enqueue(str(marker), fail)
    proc = start_worker("--threads", "2", env=worker_env(PGQUEUE_LISTEN=listen))
    try:
        wait_until(marker.exists)
        # Its progress reaches the row while it runs.
        wait_until(lambda: (fetch(created).progress or {}).get("total") == 6000)
        assert fetch(created).progress["message"] == "working"
        assert fetch(created).cancel() is True
        wait_until(lambda: fetch(created).status == JobStatus.CANCELLED)
        # The worker carries on; the cancelled job is not retried.
        after = jobs.add.enqueue(2, 3)
        wait_until(lambda: fetch(after).status == JobStatus.COMPLETED)
    finally:
        text = stop(proc)
    row = fetch(created)
    assert (row.status, row.attempts) == (JobStatus.CANCELLED, 1), text
    assert "saw cancel" in marker.read_text()
    if fail:
        assert "stopping because I was cancelled" in row.last_error
        assert row.result is None
    else:
        assert row.result == "stopped"
    assert f"until_cancelled #{row.pk}" in text and "cancelled after" in text


def test_a_job_that_ignores_the_request_is_abandoned_after_the_cancel_timeout(tmp_path: Path):
    marker = tmp_path / "marker"
    out = tmp_path / "out"
    created = jobs.ignores_cancel.enqueue(str(marker), 600.0)
    # One thread: only a replacement thread can run the job enqueued after it.
    proc = start_worker("--threads", "1", "--cancel-timeout", "1")
    try:
        wait_until(marker.exists)
        fetch(created).cancel()
        wait_until(lambda: fetch(created).status == JobStatus.CANCELLED)
        jobs.record.enqueue(str(out), "after")
        wait_until(out.exists)
    finally:
        text = stop(proc, timeout=120)
    row = fetch(created)
    assert (row.status, row.attempts) == (JobStatus.CANCELLED, 1)
    assert row.errors[-1]["exception_class"] == "django_pgqueue.exceptions.CancelTimeout"
    assert "its thread was abandoned" in row.last_error
    assert "finished" not in marker.read_text()  # still sleeping in its abandoned thread
    assert "CancelTimeout" in text


def test_a_cancelled_job_whose_abandoned_thread_still_runs_says_so_until_it_ends(
    tmp_path: Path, admin_client: Client
):
    """The worker reports the abandoned attempt's thread while it runs: the admin's job page and
    ``pgqueue_status`` say the cancelled job still runs in that worker, then plain cancelled.
    (Its process stops claiming and finishes its other job, a long one here, before it is
    replaced: the thread ends earlier, released by the test.)"""
    marker, release = tmp_path / "marker", tmp_path / "release"
    created = jobs.ignores_cancel_until.enqueue(str(marker), str(release))
    jobs.long_export.enqueue(str(tmp_path / "export"), 120)
    page = reverse("admin:django_pgqueue_job_change", args=[created.pk])
    proc = start_worker(
        "--threads",
        "2",
        "--shutdown-timeout",
        "120",
        "--cancel-timeout",
        "0.5",
        "--worker-id",
        "abandoner",
        env=worker_env(PGQUEUE_HEARTBEAT_INTERVAL="0.2"),
    )
    label = "Cancelled — still running in worker abandoner, abandoned"

    def status_text() -> str:
        out = StringIO()
        call_command("pgqueue_status", stdout=out)
        return out.getvalue()

    try:
        wait_until(marker.exists)
        fetch(created).cancel()
        wait_until(lambda: fetch(created).status == JobStatus.CANCELLED)
        wait_until(lambda: label in admin_client.get(page).content.decode())
        changelist = reverse("admin:django_pgqueue_job_changelist")
        assert label in admin_client.get(changelist).content.decode()
        text = status_text()
        assert (
            f"job #{created.pk} tests.testapp.jobs.ignores_cancel_until: "
            "cancelled — still running in worker abandoner, abandoned"
        ) in text
        assert "finished" not in marker.read_text()  # it is still running: the label is true
        release.touch()
        wait_until(lambda: "finished" in marker.read_text())
        wait_until(lambda: label not in admin_client.get(page).content.decode())
        assert "Abandoned attempts still running" not in status_text()
        content = admin_client.get(page).content.decode()
        assert "pgqueue-status-cancelled" in content and "still running" not in content
    finally:
        output = stop(proc, timeout=120)
    assert fetch(created).status == JobStatus.CANCELLED, output


def test_finish_stores_its_timestamps_to_the_microsecond_whatever_their_zone():
    """The outcome's timestamps travel as integers; none is rounded or shifted on the way."""
    from zoneinfo import ZoneInfo

    db = operations.DjangoDatabase("default")
    paris = ZoneInfo("Europe/Paris")
    started = datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)  # before the epoch
    finished = datetime(2026, 11, 24, 9, 30, 1, 123_457, tzinfo=paris)
    done = claimed(jobs.add.enqueue(1, 2))
    result = Outcome(
        done.pk,
        JobStatus.COMPLETED,
        started,
        finished,
        outcome=Attempt.COMPLETED,
        claim_token=done.claim_token,
    )
    assert operations.finish(db, "w1", [result], delete_completed=False) == {done.pk}
    done = fetch(done)
    assert (done.started_at, done.finished_at) == (started, finished)

    retried = claimed(jobs.always_fails.enqueue())
    far = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    naive = datetime(2026, 11, 24, 9, 30, 1, 5)  # USE_TZ's default zone, as the session reads it
    with override_settings(TIME_ZONE="Europe/Paris"):
        result = Outcome(
            retried.pk,
            JobStatus.PENDING,
            naive,
            None,
            run_after=far,
            outcome=Attempt.RETRIED,
            claim_token=retried.claim_token,
        )
        assert operations.finish(db, "w1", [result], delete_completed=False) == {retried.pk}
    retried = fetch(retried)
    assert retried.run_after == far
    assert retried.started_at == naive.replace(tzinfo=paris)
