"""Deploy-safe long jobs: a job its worker's shutdown hands back is interrupted, not failed.

The rule (``sql.outcomes``): an interrupted job is pending again, its ``interruptions``
counted and an entry in its history; within ``PGQUEUE_MAX_INTERRUPTIONS`` its attempt is given
back, past it the attempt counts, and a job out of attempts ends dead. Both ways in: the job
raises ``JobInterrupted`` (its outcome), or the worker hands back a job still running
(``operations.interrupt``: the shutdown timeout, the supervisor's recovery).
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_pgqueue import JobInterrupted, current_job, operations
from django_pgqueue.context import CurrentJob
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.testapp import jobs
from tests.utils import claim_rows

pytestmark = pytest.mark.django_db(transaction=True)

DB = operations.DjangoDatabase("default")


def claim_and_interrupt(job: Job) -> str:
    [claimed], _ = claim_rows(DB, limit=1)
    assert claimed.pk == job.pk
    return operations.interrupt(DB, "w", [claimed], "deploy")[job.pk]


def test_a_running_job_handed_back_keeps_its_attempt_and_runs_again():
    job = jobs.noop.enqueue()
    assert claim_and_interrupt(job) == "pending"
    job.refresh_from_db()
    assert (job.status, job.attempts, job.interruptions) == ("pending", 0, 1)
    assert (job.locked_by, job.locked_at, job.last_error) == (None, None, "")
    [entry] = job.errors
    assert entry["interrupted"] is True and entry["traceback"] == "deploy"
    assert entry["exception_class"] == "django_pgqueue.exceptions.JobInterrupted"
    assert entry["worker_id"] == "w" and entry["attempt"] == 1
    # Its ready row is back (S1): the next claim takes it, as its first attempt.
    [again], _ = claim_rows(DB, limit=1)
    assert (again.pk, again.attempts) == (job.pk, 1)
    call_command("check", "--database", "default")


@override_settings(PGQUEUE_MAX_INTERRUPTIONS=2)
def test_past_the_bound_interruptions_count_as_attempts_until_the_job_is_dead():
    job = jobs.noop.using(max_attempts=2).enqueue()
    seen = []
    for _ in range(4):
        status = claim_and_interrupt(job)
        job.refresh_from_db()
        seen.append((status, job.attempts, job.interruptions))
    assert seen == [
        ("pending", 0, 1),
        ("pending", 0, 2),
        ("pending", 1, 3),  # past the bound: the attempt counts
        ("dead", 2, 4),  # out of attempts
    ]
    assert job.finished_at is not None and job.locked_by is None
    assert job.last_error.startswith("JobInterrupted: handed back by 4 worker shutdowns")
    assert len(job.errors) == 4


def test_a_job_asked_to_stop_ends_cancelled_when_interrupted():
    job = jobs.noop.enqueue()
    [claimed], _ = claim_rows(DB, limit=1)
    claimed.cancel()
    assert operations.interrupt(DB, "w", [claimed], "deploy") == {job.pk: "cancelled"}


def test_only_the_workers_own_running_jobs_are_handed_back():
    job = jobs.noop.enqueue()
    [claimed], _ = claim_rows(DB, limit=1)  # worker "w"
    assert operations.interrupt(DB, "someone else", [claimed], "deploy") == {}
    assert Job.objects.get(pk=job.pk).status == "running"


def test_a_job_raising_job_interrupted_is_handed_back_without_spending_an_attempt(tmp_path):
    job = jobs.interrupted_until.enqueue(str(tmp_path / "marker"), 2)
    ran = run_jobs()
    assert [a.outcome for a in ran] == ["interrupted", "interrupted", "completed"]
    job.refresh_from_db()
    # max_attempts=2, interrupted twice: still its first attempt that completed.
    assert (job.status, job.attempts, job.interruptions, job.result) == ("completed", 1, 2, 2)
    assert [e["traceback"] for e in job.errors] == ["interrupted 1", "interrupted 2"]


def test_a_retry_by_hand_starts_the_count_again():
    job = jobs.noop.using(max_attempts=1).enqueue()
    with override_settings(PGQUEUE_MAX_INTERRUPTIONS=0):
        assert claim_and_interrupt(job) == "dead"
    assert Job.objects.filter(pk=job.pk).retry() == [job.pk]
    job.refresh_from_db()
    assert (job.status, job.attempts, job.interruptions) == ("pending", 0, 0)


def test_shutdown_requested_outside_a_worker_is_false_until_a_test_sets_it():
    me = current_job()
    assert me.shutdown_requested is False
    me.request_shutdown()
    assert me.shutdown_requested is True
    assert CurrentJob.standalone().shutdown_requested is False
    assert issubclass(JobInterrupted, Exception)
