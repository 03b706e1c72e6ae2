"""A job's life: success, retries with backoff, dead jobs, manual operations and retention."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_pgqueue import signals
from django_pgqueue.models import Job
from django_pgqueue.retries import RetryStrategy
from django_pgqueue.worker import Worker
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def drain(**options):
    """Run a real worker loop in this process until no runnable job is left."""
    worker = Worker(burst=True, listen=False, **options)
    assert worker.run() == 0
    return worker


def test_success_stores_the_result_and_timing():
    created = jobs.add.enqueue(2, 3)
    drain()
    row = Job.objects.get(pk=created.pk)
    assert row.status == "completed"
    assert row.result == 5
    assert row.attempts == 1
    assert row.locked_at is None
    assert row.started_at is not None and row.finished_at >= row.started_at
    assert row.ran_for is not None and row.queued_for is not None


def test_a_failing_job_is_retried_then_dead_after_max_attempts():
    created = jobs.always_fails.enqueue("nope")  # max_attempts=3, backoff 0 in tests
    drain()
    row = Job.objects.get(pk=created.pk)
    assert row.status == "dead"
    assert row.attempts == 3
    assert len(row.errors) == 3
    assert [e["attempt"] for e in row.errors] == [1, 2, 3]
    assert all(e["exception_class"] == "builtins.RuntimeError" for e in row.errors)
    assert "RuntimeError: nope" in row.last_error
    assert "Traceback (most recent call last)" in row.last_error
    assert row.finished_at is not None


def test_a_flaky_job_succeeds_on_a_later_attempt(tmp_path):
    created = jobs.fails_until.enqueue(str(tmp_path / "count"), 3)
    drain()
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.attempts, row.result) == ("completed", 3, 3)
    assert len(row.errors) == 2


@override_settings(PGQUEUE_BACKOFF_BASE=100, PGQUEUE_BACKOFF_JITTER=0.3)
def test_a_failure_waits_for_its_backoff_with_jitter():
    created = jobs.always_fails.enqueue()
    drain()  # one attempt, then the retry is not runnable yet
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.attempts) == ("pending", 1)
    failed_at = datetime.fromisoformat(row.errors[0]["at"])
    delay = (row.run_after - failed_at).total_seconds()
    assert 100 <= delay <= 130.01


def test_backoff_schedule_doubles_with_bounded_jitter_and_a_cap():
    for attempt, base_delay in [(1, 10), (2, 20), (3, 40), (4, 80)]:
        delays = [RetryStrategy(10, 3600, 0.3).delay(attempt) for _ in range(200)]
        assert all(base_delay <= d <= base_delay * 1.3 for d in delays)
        assert max(delays) > base_delay * 1.05, "no jitter"
    assert RetryStrategy(10, 3600, 0.3).delay(20) == 3600
    assert RetryStrategy(10, 3600, 0).delay(3) == 40


def test_an_unknown_job_name_fails_that_job_not_the_worker():
    unknown = Job.objects.create(name="gone.module.job", max_attempts=2)
    fine = jobs.add.enqueue(1, 1)
    drain()
    unknown.refresh_from_db()
    assert unknown.status == "dead"
    assert unknown.attempts == 2
    assert "No job named 'gone.module.job' is registered" in unknown.last_error
    assert Job.objects.get(pk=fine.pk).status == "completed"


def test_a_non_json_return_value_fails_the_job():
    created = jobs.returns_set.using(max_attempts=3).enqueue()
    drain()
    row = Job.objects.get(pk=created.pk)
    assert row.status == "dead"
    assert "ResultNotStorable" in row.last_error
    assert "its return value cannot be stored" in row.last_error


def test_signals_report_start_and_outcome():
    seen = []

    def started(sender, job, worker_id, **kwargs):
        seen.append(("started", job.pk))

    def finished(sender, job, worker_id, outcome, exception, **kwargs):
        seen.append((outcome, job.pk, type(exception).__name__ if exception else None))

    def broken(sender, **kwargs):
        raise RuntimeError("receivers must not break jobs")

    signals.job_started.connect(started)
    signals.job_finished.connect(finished)
    signals.job_finished.connect(broken)
    try:
        ok = jobs.add.enqueue(1, 1)
        bad = jobs.always_fails.using(max_attempts=1).enqueue()
        drain()
    finally:
        signals.job_started.disconnect(started)
        signals.job_finished.disconnect(finished)
        signals.job_finished.disconnect(broken)
    assert ("started", ok.pk) in seen and ("started", bad.pk) in seen
    assert ("completed", ok.pk, None) in seen
    assert ("dead", bad.pk, "RuntimeError") in seen
    assert Job.objects.get(pk=ok.pk).status == "completed"


def test_retry_dead_jobs_resets_attempts_and_makes_them_runnable():
    dead = [jobs.always_fails.using(max_attempts=1).enqueue() for _ in range(3)]
    other_queue = jobs.always_fails.using(max_attempts=1, queue="other").enqueue()
    drain()
    assert Job.objects.dead().count() == 4
    retried = Job.objects.retry_dead(queue="default")
    assert sorted(retried) == sorted(j.pk for j in dead)
    for row in Job.objects.filter(pk__in=retried):
        assert (row.status, row.attempts) == ("pending", 0)
        assert row.run_after <= timezone.now()
        assert row.finished_at is None
    assert Job.objects.get(pk=other_queue.pk).status == "dead"
    # Retrying one job from the model.
    row = Job.objects.get(pk=other_queue.pk)
    assert row.retry() is True
    assert row.status == "pending"
    assert row.retry() is False, "a pending job that never failed is not retryable"


def test_retry_leaves_a_job_whose_unique_key_is_taken():
    dead = jobs.always_fails.using(max_attempts=1, unique_key="once").enqueue()
    drain()
    active = jobs.always_fails.using(unique_key="once").enqueue()
    assert active.pk != dead.pk
    assert Job.objects.filter(pk=dead.pk).retry() == []
    assert Job.objects.get(pk=dead.pk).status == "dead"


def test_cancel_only_touches_pending_jobs():
    pending = jobs.add.enqueue(1, 1)
    done = jobs.add.enqueue(2, 2)
    Job.objects.filter(pk=done.pk).update(status="completed")
    assert Job.objects.all().cancel() == 1
    assert Job.objects.get(pk=pending.pk).status == "cancelled"
    assert Job.objects.get(pk=done.pk).status == "completed"
    drain()
    assert Job.objects.get(pk=pending.pk).status == "cancelled"


def test_run_now_makes_scheduled_jobs_runnable():
    later = jobs.add.using(run_after=timedelta(hours=2)).enqueue(1, 1)
    drain()
    assert Job.objects.get(pk=later.pk).status == "pending"
    assert Job.objects.filter(pk=later.pk).run_now() == 1
    drain()
    assert Job.objects.get(pk=later.pk).status == "completed"


@override_settings(PGQUEUE_RETENTION=0)
def test_zero_retention_deletes_completed_jobs_at_once():
    jobs.noop.enqueue_many([()] * 20)
    failing = jobs.always_fails.using(max_attempts=1).enqueue()
    drain()
    assert list(Job.objects.values_list("id", flat=True)) == [failing.pk]


@override_settings(
    PGQUEUE_RETENTION=timedelta(days=1),
    PGQUEUE_DEAD_RETENTION=timedelta(days=30),
    PGQUEUE_PRUNE_BATCH_SIZE=10,
)
def test_pruning_deletes_expired_history_in_bounded_batches():
    expired = jobs.noop.enqueue_many([()] * 25)
    recent = jobs.noop.enqueue()
    dead = jobs.always_fails.using(max_attempts=1).enqueue()
    drain()
    old = timezone.now() - timedelta(days=2)
    Job.objects.filter(pk__in=[*expired, dead.pk]).update(finished_at=old)  # dead: kept 30 days
    assert Job.objects.prune() == 10
    assert Job.objects.prune() == 10
    assert Job.objects.prune() == 5
    assert Job.objects.prune() == 0
    assert sorted(Job.objects.values_list("id", flat=True)) == sorted([recent.pk, dead.pk])


def test_workers_prune_on_their_normal_loop():
    jobs.noop.enqueue_many([()] * 5)
    drain()
    Job.objects.update(finished_at=timezone.now() - timedelta(days=30))
    jobs.noop.enqueue()
    with override_settings(PGQUEUE_RETENTION=timedelta(days=7)):
        drain()
    assert Job.objects.count() == 1


def test_the_worker_reports_itself_in_the_worker_table():
    from django_pgqueue.models import Worker as WorkerRow

    jobs.noop.enqueue()
    worker = drain(worker_id="lifecycle-worker")
    row = WorkerRow.objects.get(worker_id=worker.worker_id)
    assert row.stopped_at is not None
    assert row.queues == []


def test_run_now_keeps_the_place_of_jobs_that_are_already_runnable():
    older = jobs.noop.enqueue()
    newer = jobs.noop.enqueue()
    before = Job.objects.get(pk=newer.pk).run_after
    assert Job.objects.filter(pk=newer.pk).run_now() == 0
    assert Job.objects.get(pk=newer.pk).run_after == before
    assert [j.pk for j in Job.objects.claim("w", limit=2)] == [older.pk, newer.pk]


def test_run_jobs_returns_normally_from_call_command_in_burst_mode():
    from django.core.management import call_command

    from django_pgqueue.models import Worker as WorkerRow

    jobs.add.enqueue_many([(1, 1)] * 3)
    call_command("run_jobs", "--burst", "--worker-id", "called", verbosity=0)
    assert Job.objects.completed().count() == 3
    assert WorkerRow.objects.get(worker_id="called").jobs_done == 3
