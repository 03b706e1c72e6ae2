"""The SKIP LOCKED claim, proven with real concurrent connections."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import override_settings
from django.utils import timezone

from django_pgqueue import pause_queue
from django_pgqueue.models import Job
from django_pgqueue.sql import JOB_COLUMNS
from tests.testapp import jobs
from tests.utils import run_threads

pytestmark = pytest.mark.django_db(transaction=True)


def test_claim_marks_jobs_running_and_counts_the_attempt():
    created = jobs.add.enqueue(1, 2)
    [claimed] = Job.objects.claim("w1")
    assert claimed.pk == created.pk
    assert claimed.args == [1, 2]
    row = Job.objects.get()
    assert (row.status, row.attempts, row.locked_by) == ("running", 1, "w1")
    assert row.locked_at is not None and row.started_at is not None
    assert Job.objects.claim("w2") == []


def test_a_claimed_job_holds_the_claimed_columns_and_defers_the_others():
    created = jobs.add.using(priority=3).enqueue(1, 2)
    [claimed] = Job.objects.claim("w1")
    row = Job.objects.get()
    for column in JOB_COLUMNS:
        assert getattr(claimed, column) == getattr(row, column), column
    not_claimed = {f.attname for f in Job._meta.concrete_fields} - set(JOB_COLUMNS)
    assert not_claimed  # columns only the admin and the control statements read
    assert claimed.get_deferred_fields() == not_claimed
    assert (claimed.pk, claimed.priority, claimed._state.adding) == (created.pk, 3, False)
    assert claimed._state.db == "default"
    # A deferred field still reads the row, as Django's deferred loading does.
    assert claimed.concurrency_place == row.concurrency_place


@pytest.mark.parametrize("claim", ["plain", "limited"])
@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
def test_concurrent_claims_receive_every_job_exactly_once(claim, keyed):
    """Six claims hold their first batches open together: each locks only the jobs it takes,
    so SKIP LOCKED hands each one a batch of its own. (A plan that locked a job, or a key's
    advisory lock, for every ring row before sorting them left every other claim empty: the
    ring's statistics, not the load, decided it.)"""
    if claim == "limited":
        # Any queue with settings sends every claim to the limited statement. (A limit of the
        # queue itself would make its claims take turns, under its advisory lock.)
        pause_queue("elsewhere")
    if keyed:
        with transaction.atomic():
            for i in range(600):
                jobs.noop.using(concurrency_key=f"k{i}").enqueue()
    else:
        jobs.noop.enqueue_many([()] * 600)
    received: list[list[int]] = [[] for _ in range(6)]
    barrier = threading.Barrier(6)

    def claim_until_empty(index):
        with transaction.atomic():
            received[index].extend(j.pk for j in Job.objects.claim(f"w{index}", limit=7))
            barrier.wait(timeout=60)
        while batch := Job.objects.claim(f"w{index}", limit=7):
            received[index].extend(j.pk for j in batch)

    run_threads(6, claim_until_empty)
    everything = [pk for ids in received for pk in ids]
    assert len(everything) == 600
    assert set(everything) == set(Job.objects.values_list("id", flat=True))
    assert all(len(ids) >= 7 for ids in received), [len(ids) for ids in received]
    assert set(Job.objects.values_list("status", flat=True)) == {"running"}


def test_a_row_locked_by_another_transaction_is_skipped_not_waited_for(other_connection):
    first = jobs.add.enqueue(1, 1)
    second = jobs.add.enqueue(2, 2)
    other_connection.set_autocommit(False)
    with other_connection.cursor() as cursor:
        cursor.execute("SELECT id FROM pgqueue_job WHERE id = %s FOR UPDATE", [first.pk])
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # Were the claim to wait for the lock, this turns the hang into an error.
            cursor.execute("SET LOCAL lock_timeout = '5s'")
            claimed = Job.objects.claim("w1", limit=2)
        assert [j.pk for j in claimed] == [second.pk]
    finally:
        other_connection.rollback()
        other_connection.set_autocommit(True)
    assert [j.pk for j in Job.objects.claim("w1", limit=2)] == [first.pk]


def test_claim_order_is_priority_then_run_after_and_skips_future_jobs():
    now = timezone.now()
    low = jobs.noop.using(priority=-10).enqueue()
    late = jobs.noop.using(run_after=now - timedelta(seconds=1)).enqueue()
    early = jobs.noop.using(run_after=now - timedelta(seconds=10)).enqueue()
    high = jobs.noop.using(priority=50).enqueue()
    jobs.noop.using(run_after=now + timedelta(hours=1), priority=100).enqueue()
    claimed = Job.objects.claim("w", limit=10)
    assert [j.pk for j in claimed] == [high.pk, early.pk, late.pk, low.pk]


def test_queues_are_claimed_in_the_order_given():
    default = jobs.noop.using(priority=100).enqueue()
    email = jobs.noop.using(queue="emails", priority=-100).enqueue()
    jobs.noop.using(queue="ignored").enqueue()
    claimed = Job.objects.claim("w", queues=["emails", "default"], limit=10)
    assert [j.pk for j in claimed] == [email.pk, default.pk]
    # One job: the first queue wins even with a lower priority.
    jobs.noop.using(priority=100).enqueue()
    jobs.noop.using(queue="emails", priority=-100).enqueue()
    [only] = Job.objects.claim("w", queues=["emails", "default"], limit=1)
    assert only.queue == "emails"


@override_settings(PGQUEUE_VISIBILITY_TIMEOUT=30)
def test_a_job_whose_worker_stopped_heartbeating_is_reclaimed_and_counted():
    created = jobs.add.enqueue(1, 2)
    Job.objects.claim("dead-worker")
    assert Job.objects.claim("w2") == [], "a fresh lock is not stale"
    Job.objects.filter(pk=created.pk).update(locked_at=timezone.now() - timedelta(seconds=31))
    [reclaimed] = Job.objects.claim("w2")
    assert reclaimed.pk == created.pk
    row = Job.objects.get()
    assert (row.status, row.attempts, row.locked_by) == ("running", 2, "w2")
    assert row.errors[-1]["exception_class"] == "django_pgqueue.exceptions.WorkerLost"
    assert row.errors[-1]["worker_id"] == "dead-worker"
    assert "dead-worker stopped heartbeating" in row.last_error


@override_settings(PGQUEUE_VISIBILITY_TIMEOUT=30)
def test_a_job_that_keeps_killing_its_worker_goes_dead_after_max_attempts():
    created = jobs.always_fails.enqueue()  # max_attempts=3
    for attempt in range(1, 4):
        [claimed] = Job.objects.claim(f"w{attempt}")
        assert claimed.attempts == attempt
        Job.objects.filter(pk=created.pk).update(locked_at=timezone.now() - timedelta(minutes=1))
    assert Job.objects.claim("w4") == []
    row = Job.objects.get()
    assert (row.status, row.attempts) == ("dead", 3)
    assert row.finished_at is not None
    assert "WorkerLost" in row.last_error


def test_one_running_job_per_concurrency_key_within_a_claim():
    for i in range(3):
        jobs.add.using(concurrency_key="tenant-7").enqueue(i, i)
    free = jobs.add.enqueue(9, 9)
    claimed = Job.objects.claim("w", limit=10)
    assert sorted(j.pk for j in claimed if j.concurrency_key is None) == [free.pk]
    assert sum(1 for j in claimed if j.concurrency_key == "tenant-7") == 1
    assert Job.objects.claim("w", limit=10) == []


def test_the_database_refuses_two_running_jobs_with_one_key():
    a = jobs.add.using(concurrency_key="tenant-1").enqueue(1, 1)
    b = jobs.add.using(concurrency_key="tenant-1").enqueue(2, 2)
    Job.objects.filter(pk=a.pk).update(status="running")
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=b.pk).update(status="running")


def test_concurrent_claims_never_run_two_jobs_of_one_key_at_once():
    keys = ["tenant-a", "tenant-b"]
    for i in range(40):
        jobs.add.using(concurrency_key=keys[i % 2]).enqueue(i, i)
    jobs.noop.enqueue_many([()] * 40)
    running: dict[str, int] = {}
    overlaps: list[str] = []
    ran: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def work(index):
        barrier.wait()
        idle = 0
        while idle < 20:
            batch = Job.objects.claim(f"w{index}", limit=3)
            if not batch:
                idle += 1
                threading.Event().wait(0.01)
                continue
            idle = 0
            for claimed in batch:
                key = claimed.concurrency_key
                with lock:
                    if key and running.get(key):
                        overlaps.append(key)
                    if key:
                        running[key] = claimed.pk
                    ran.append(claimed.pk)
                threading.Event().wait(0.002)
                with lock:
                    if key:
                        running[key] = 0
                Job.objects.filter(pk=claimed.pk).update(status="completed")

    run_threads(4, work)
    assert overlaps == []
    assert sorted(ran) == sorted(Job.objects.values_list("id", flat=True))


def test_settling_after_a_lost_connection_hands_back_only_the_jobs_the_worker_never_knew_of():
    """``Claimer.settle``: the jobs a claim took while its answer was lost go back to pending
    with their attempt refunded, claimable at once; the worker's known jobs and another
    worker's stay running."""
    from django_pgqueue.worker.claims import Claimer
    from django_pgqueue.worker.connection import QueueConnection

    known, *unknown = jobs.add.enqueue_many([(i, i) for i in range(3)])
    [others] = jobs.add.enqueue_many([(9, 9)])
    assert len(Job.objects.claim("w1", limit=3)) == 3
    assert len(Job.objects.claim("w2")) == 1
    queue_connection = QueueConnection("default", "settle test")
    claimer = Claimer(queue_connection, "w1", None, burst=False)
    claimer.unsettled = True
    try:
        assert claimer.settle([known]) == 2
    finally:
        queue_connection.close()
    assert not claimer.unsettled
    rows = {job.pk: job for job in Job.objects.all()}
    assert (rows[known].status, rows[known].locked_by) == ("running", "w1")
    assert (rows[others].status, rows[others].locked_by) == ("running", "w2")
    for job_id in unknown:
        row = rows[job_id]
        assert (row.status, row.attempts, row.locked_by, row.errors) == ("pending", 0, None, [])
    assert {job.pk for job in Job.objects.claim("w3", limit=5)} == set(unknown)
    [again] = jobs.add.enqueue_many([(5, 5)])
    assert len(Job.objects.claim("w1")) == 1
    claimer.id_shared = True  # another process runs as w1: its jobs may be among them
    claimer.unsettled = True
    try:
        assert claimer.settle([known]) == 0
        assert claimer.settle([known]) == 0  # nothing more
    finally:
        queue_connection.close()
    assert Job.objects.get(pk=again).status == "running"


def test_a_burst_runs_the_upkeep_after_a_claim_short_of_each_kind_not_one_that_filled_its_threads():
    """A burst worker asks for async jobs besides its threads' room; a claim that filled the
    threads' room and found no async job is not short of work (before, each of a drain's claims
    ran the upkeep, a dozen statements). One that found too few of both looks for stale jobs."""
    import time

    from django_pgqueue.worker.claims import Claimer
    from django_pgqueue.worker.connection import QueueConnection

    jobs.add.enqueue_many([(i, i) for i in range(3)])
    [stale] = Job.objects.claim("gone", limit=1)
    Job.objects.filter(pk=stale.pk).update(locked_at=timezone.now() - timedelta(days=1))
    queue_connection = QueueConnection("default", "burst upkeep test")
    claimer = Claimer(queue_connection, "w1", None, burst=True)
    claimer.next_reclaim = time.monotonic() + 3600  # not due: only a short claim runs it
    took: list[Job] = []
    try:
        assert claimer.claim(2, took.extend, async_limit=5) == 2
        assert Job.objects.get(pk=stale.pk).locked_by == "gone"  # no upkeep
        assert claimer.claim(2, took.extend, async_limit=5) == 1  # short of both: the upkeep
    finally:
        queue_connection.close()
    assert stale.pk in {job.pk for job in took}
    assert Job.objects.get(pk=stale.pk).locked_by == "w1"


@pytest.mark.django_db
def test_claimed_rows_become_jobs_equal_to_the_orms_and_init_signals_still_fire():
    from django.db.models.signals import post_init

    from django_pgqueue.operations.claim import jobs_from_rows

    job = jobs.add.enqueue(2, 3)
    with connection.cursor() as cursor:
        # Django loads jsonb as text, as the claim's rows come.
        cursor.execute(f"SELECT {', '.join(JOB_COLUMNS)} FROM pgqueue_job WHERE id = %s", [job.pk])
        row = cursor.fetchone()
    built = jobs_from_rows("default", [row])[0]
    orm = Job.objects.get(pk=job.pk)
    assert not built._state.adding and built._state.db == "default"
    assert built.get_deferred_fields() == {
        f.attname for f in Job._meta.concrete_fields if f.attname not in JOB_COLUMNS
    }
    for name in JOB_COLUMNS:
        if name != "trace_context":
            assert getattr(built, name) == getattr(orm, name), name
    built.refresh_from_db(fields=["cancel_requested_at"])  # a deferred field loads as usual
    assert built.cancel_requested_at is None

    initialized = []

    def receiver(sender, instance, **kwargs):
        initialized.append(instance)

    post_init.connect(receiver, sender=Job)
    try:
        listened = jobs_from_rows("default", [row])[0]
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert initialized == [listened]
