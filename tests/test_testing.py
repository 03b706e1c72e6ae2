"""The test helpers of django_pgqueue.testing, on real PostgreSQL: capture_jobs, run_jobs and
their pytest fixtures, in a test's transaction and outside one."""

from __future__ import annotations

import threading
from datetime import timedelta

import django
import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.dispatch import receiver
from django.utils import timezone

from django_pgqueue.models import Job
from django_pgqueue.signals import job_finished
from django_pgqueue.testing import capture_jobs, run_jobs
from tests.testapp import jobs

# ----- capture_jobs ------------------------------------------------------------------------


@pytest.mark.django_db
def test_capture_lists_each_enqueue_with_its_options():
    before = jobs.add.enqueue(0, 0)
    later = timezone.now() + timedelta(hours=1)
    with capture_jobs() as captured:
        first = jobs.add.enqueue(1, b=2)
        jobs.send_welcome.using(priority=-5, run_after=later, concurrency_key="u:7").enqueue(7)
        ids = jobs.noop.using(queue="bulk").enqueue_many([(), ()])
    jobs.add.enqueue(3, 4)  # after the block: not captured

    assert captured.names == [
        "tests.testapp.jobs.add",
        "tests.testapp.jobs.send_welcome",
        "tests.testapp.jobs.noop",
        "tests.testapp.jobs.noop",
    ]
    add = captured.get(jobs.add)
    assert (add.id, add.args, add.kwargs, add.queue) == (first.pk, [1], {"b": 2}, "default")
    assert add.id != before.pk
    welcome = captured.get("tests.testapp.jobs.send_welcome")
    assert welcome.options == {
        "queue": "emails",
        "priority": -5,
        "run_after": later,
        "max_attempts": 5,
        "unique_key": None,
        "concurrency_key": "u:7",
    }
    assert [j.id for j in captured.filter(queue="bulk")] == ids
    with pytest.raises(AssertionError, match=r"expected one job tests\.testapp\.jobs\.noop"):
        captured.get(jobs.noop)


@pytest.mark.django_db
def test_capture_marks_a_deduplicated_enqueue():
    with capture_jobs() as captured:
        a = jobs.add.using(unique_key="once").enqueue(1, 1)
        b = jobs.add.using(unique_key="once").enqueue(2, 2)
    assert [(c.id, c.deduplicated) for c in captured] == [(a.pk, False), (a.pk, True)]
    assert b.pk == a.pk


@pytest.mark.django_db
def test_capture_sees_enqueue_on_commit_when_the_transaction_commits(
    django_capture_on_commit_callbacks,
):
    with capture_jobs() as captured:
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            jobs.add.enqueue_on_commit(5, 6)
            assert captured == []  # not before the commit
        assert captured.names == ["tests.testapp.jobs.add"]
    with capture_jobs() as rolled_back, django_capture_on_commit_callbacks(execute=False):
        jobs.add.enqueue_on_commit(7, 8)
    assert rolled_back == []


class _Abort(Exception):
    pass


@pytest.mark.django_db
def test_capture_forgets_jobs_whose_atomic_block_raised():
    with capture_jobs() as captured:
        with pytest.raises(_Abort), transaction.atomic():
            jobs.add.enqueue(1, 1)
            jobs.noop.enqueue_many([(), ()])
            assert captured.names == ["tests.testapp.jobs.add"] + ["tests.testapp.jobs.noop"] * 2
            raise _Abort
        assert captured == [] and list(captured) == [] and captured.copy() == []
        kept = jobs.add.enqueue(2, 2)
    assert [c.id for c in captured] == [kept.pk]
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]


@pytest.mark.django_db(transaction=True)
def test_capture_follows_savepoints_inside_a_committed_transaction():
    with capture_jobs() as captured:
        with transaction.atomic():
            outer = jobs.add.enqueue(1, 1)
            with pytest.raises(_Abort), transaction.atomic():
                jobs.add.enqueue(2, 2)
                jobs.noop.enqueue_many([(), ()])
                with transaction.atomic():  # committed into the savepoint that rolls back
                    jobs.add.enqueue(3, 3)
                raise _Abort
            assert [c.id for c in captured] == [outer.pk]
            many = jobs.noop.enqueue_many([(), ()])
        assert [c.id for c in captured] == [outer.pk, *many]
    assert [c.id for c in captured] == [outer.pk, *many]  # committed: they stay
    assert sorted(Job.objects.values_list("pk", flat=True)) == sorted([outer.pk, *many])


@pytest.mark.django_db(transaction=True)
def test_capture_forgets_a_transaction_rolled_back_after_the_block():
    with transaction.atomic():
        with capture_jobs() as captured:
            jobs.add.enqueue(1, 1)
        assert len(captured) == 1
        transaction.set_rollback(True)
    assert captured == []
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_capture_sees_enqueue_on_commit_only_when_committed():
    with capture_jobs() as captured:
        with pytest.raises(_Abort), transaction.atomic():
            jobs.add.enqueue_on_commit(1, 1)
            raise _Abort
        with transaction.atomic():
            jobs.add.enqueue_on_commit(2, 2)
            with pytest.raises(_Abort), transaction.atomic():
                jobs.add.enqueue_on_commit(3, 3)
                raise _Abort
            assert captured == []
    assert [c.args for c in captured] == [[2, 2]]
    assert list(Job.objects.values_list("args", flat=True)) == [[2, 2]]


@pytest.mark.django_db(transaction=True)
def test_capture_sees_jobs_enqueued_by_other_threads_and_really_committed():
    def enqueue() -> None:
        jobs.add.enqueue(1, 1)
        connection.close()

    with capture_jobs() as captured:
        with transaction.atomic():
            jobs.add.enqueue_on_commit(2, 2)
        thread = threading.Thread(target=enqueue)
        thread.start()
        thread.join()
    assert sorted(c.args for c in captured) == [[1, 1], [2, 2]]
    assert Job.objects.count() == 2


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0+")
@pytest.mark.django_db
def test_capture_sees_django_tasks():
    from django.test import override_settings

    from tests.taskapp.config import TASKS

    with override_settings(TASKS=TASKS):
        from tests.taskapp import tasks

        with capture_jobs() as captured:
            tasks.add.enqueue(2, 3)
    assert captured.get(tasks.add).args == [2, 3]


# ----- run_jobs ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_run_jobs_runs_pending_jobs_in_the_test_transaction_and_says_what_happened():
    created = jobs.create_group.enqueue("made by a job")
    jobs.add.enqueue(2, 3)
    ran = run_jobs()
    assert [(a.name, a.outcome) for a in ran] == [
        ("tests.testapp.jobs.create_group", "completed"),
        ("tests.testapp.jobs.add", "completed"),
    ]
    group = Group.objects.get(name="made by a job")  # the job's write, seen by the test
    assert ran.results == {created.pk: group.pk, created.pk + 1: 5}
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.attempts, row.result, row.locked_by) == (
        "completed",
        1,
        group.pk,
        "run_jobs",
    )
    assert run_jobs() == []  # nothing left


@pytest.mark.django_db
def test_run_jobs_runs_retries_at_once_up_to_max_attempts(settings, tmp_path):
    settings.PGQUEUE_BACKOFF_BASE = 3600  # an hour between attempts: not waited for
    dead = jobs.always_fails.enqueue("no luck")
    flaky = jobs.fails_until.enqueue(str(tmp_path / "count"), 2)
    ran = run_jobs()
    # A retry is due at once: here, before the next job due at the same (frozen) time.
    assert [(a.job_id, a.attempt, a.outcome) for a in ran] == [
        (dead.pk, 1, "retried"),
        (dead.pk, 2, "retried"),
        (dead.pk, 3, "dead"),
        (flaky.pk, 1, "retried"),
        (flaky.pk, 2, "completed"),
    ]
    assert [a.job_id for a in ran.dead] == [dead.pk]
    assert all(isinstance(a.exception, RuntimeError | ValueError) for a in ran.failures)
    row = Job.objects.get(pk=dead.pk)
    assert (row.status, row.attempts, len(row.errors)) == ("dead", 3, 3)
    assert "RuntimeError: no luck" in row.last_error
    assert Job.objects.get(pk=flaky.pk).result == 2
    with pytest.raises(AssertionError, match=r"always_fails #\d+ attempt 1 failed") as raised:
        ran.raise_failures()
    assert isinstance(raised.value.__cause__, RuntimeError)


@pytest.mark.django_db
def test_a_job_that_breaks_the_transaction_leaves_the_test_usable():
    Group.objects.create(name="taken")
    created = jobs.create_group_then_fail.enqueue("taken")
    ran = run_jobs()
    assert [a.outcome for a in ran] == ["retried", "dead"]
    assert "IntegrityError" in type(ran[0].exception).__name__
    # Its statements before the failing one were undone with it; the test carries on.
    assert not Group.objects.filter(name="taken-written").exists()
    assert Job.objects.get(pk=created.pk).status == "dead"


@pytest.mark.django_db
def test_a_job_that_leaves_a_transaction_open_fails_and_is_unwound():
    jobs.leaves_atomic_open.enqueue()
    (attempt,) = run_jobs()
    assert attempt.outcome == "dead"
    assert type(attempt.exception).__name__ == "TransactionLeftOpen"
    assert Group.objects.create(name="still fine").pk


@pytest.mark.django_db
def test_run_jobs_by_queue_and_scheduled_jobs_on_request():
    jobs.add.enqueue(1, 1)
    email = jobs.send_welcome.enqueue(1)  # queue "emails"
    later = jobs.add.using(run_after=timedelta(days=1)).enqueue(9, 9)
    assert [a.job_id for a in run_jobs("emails")] == [email.pk]
    assert [a.name for a in run_jobs(["default"])] == ["tests.testapp.jobs.add"]
    assert run_jobs() == []  # the scheduled one waits
    assert [a.job_id for a in run_jobs(scheduled=True)] == [later.pk]


@pytest.mark.django_db
def test_jobs_enqueued_by_jobs_run_too_and_a_runaway_job_is_stopped():
    assert [a.result for a in run_jobs() if a] == []
    jobs.countdown.enqueue(3)
    assert [a.result for a in run_jobs()] == [3, 2, 1, 0]
    jobs.enqueues_itself.enqueue()
    with pytest.raises(RuntimeError, match="ran 5 attempts and jobs are still runnable"):
        run_jobs(limit=5)
    # The job it would have run next is left pending, not running.
    assert Job.objects.filter(name="tests.testapp.jobs.enqueues_itself", status="pending").count()
    assert not Job.objects.filter(status="running").exists()


@pytest.mark.django_db
def test_run_jobs_sends_the_worker_signals():
    seen = []

    @receiver(job_finished)
    def record(sender, job, worker_id, outcome, exception, **kwargs):
        seen.append((job.name, worker_id, outcome))

    try:
        jobs.add.enqueue(1, 2)
        run_jobs()
    finally:
        job_finished.disconnect(record)
    assert seen == [("tests.testapp.jobs.add", "run_jobs", "completed")]


@pytest.mark.django_db(transaction=True)
def test_run_jobs_in_a_transactional_test_commits_like_a_worker():
    jobs.create_group.enqueue("committed")
    jobs.always_fails.using(max_attempts=2).enqueue()
    ran = run_jobs()
    assert [a.outcome for a in ran] == ["completed", "retried", "dead"]
    assert Group.objects.filter(name="committed").exists()


# ----- the pytest fixtures (the plugin installed by the pytest11 entry point) ---------------


def test_the_fixtures_capture_and_run(captured_jobs, run_jobs):
    jobs.add.enqueue(20, 22)
    assert captured_jobs.get(jobs.add).args == [20, 22]
    (attempt,) = run_jobs()
    assert attempt.result == 42


def test_the_plugin_is_registered_by_the_distribution(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("django_pgqueue")


@pytest.mark.django_db
def test_run_jobs_runs_rate_limited_jobs_and_honours_pauses():
    """Once it used the plain claim: no rate-limited job ran (and raise_failures() passed), a
    1/h queue ran 3, and a paused queue's job enqueued after the pause ran."""
    from django_pgqueue import limit_queue, pause_queue
    from django_pgqueue.testing import run_jobs

    charges = [jobs.charge.enqueue(n).pk for n in range(15)]  # rate_limit="10/s"
    limit_queue("hourly", rate_limit="1/h")
    hourly = [jobs.noop.using(queue="hourly").enqueue().pk for _ in range(3)]
    early = jobs.noop.using(queue="paused").enqueue()
    pause_queue("paused")
    late = jobs.noop.using(queue="paused").enqueue()
    ran = run_jobs()
    assert sorted(a.job_id for a in ran.completed) == sorted(charges + hourly)
    assert set(Job.objects.filter(pk__in=[early.pk, late.pk]).values_list("status", flat=True)) == {
        "pending"
    }


@pytest.mark.django_db
def test_run_jobs_respects_rate_limits_when_asked():
    from django_pgqueue import limit_queue
    from django_pgqueue.testing import run_jobs

    limit_queue("hourly", rate_limit="1/h")
    hourly = [jobs.noop.using(queue="hourly").enqueue().pk for _ in range(3)]
    ran = run_jobs(respect_limits=True)
    assert len(ran.completed) == 1
    assert Job.objects.filter(pk__in=hourly, status="pending").count() == 2
