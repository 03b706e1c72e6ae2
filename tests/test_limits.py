"""Limits above one and rate limits, enforced by the claim: rows, and real workers."""

from __future__ import annotations

from collections import Counter

import pytest
from django.core.management import call_command
from django.db import connection

from django_pgqueue import JobSpec, limit_queue
from django_pgqueue.models import Job, Queue, RateWindow
from django_pgqueue.models import Worker as WorkerRow
from tests.testapp import jobs
from tests.utils import (
    busiest_window,
    most_overlapping,
    runs,
    runs_by_key,
    start_worker,
    stop,
    wait_until,
    worker_env,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_limits_are_checked_before_anything_is_written():
    with pytest.raises(ValueError, match="concurrency_limit must be between 1"):
        JobSpec(name="x", concurrency_limit=0)
    with pytest.raises(ValueError, match="rate_limit must look like"):
        JobSpec(name="x", rate_limit="ten per second")
    with pytest.raises(ValueError, match="period must be from 1 ms to 7 days"):
        JobSpec(name="x", rate_limit="1/30d")
    with pytest.raises(ValueError, match="rate_limit"):
        limit_queue("emails", rate_limit="0/s")
    assert not Queue.objects.exists()


def test_a_held_back_job_keeps_its_place_and_spends_no_attempt():
    ids = [jobs.charge.enqueue(i).pk for i in range(15)]
    assert RateWindow.objects.get(pk="key:stripe").starts == 10
    first = Job.objects.claim("w1", limit=100)
    assert [j.pk for j in first] == ids[:10]  # the first ten, in order
    assert Job.objects.claim("w2", limit=100) == []  # the window is full
    held = Job.objects.filter(pk__in=ids[10:])
    assert set(held.values_list("status", "attempts")) == {("pending", 0)}
    Job.objects.filter(pk__in=ids[:10]).update(status="completed")
    with connection.cursor() as cursor:  # a second later, as far as the window knows
        cursor.execute(
            "UPDATE pgqueue_rate_window SET recent = "
            "ARRAY(SELECT t - interval '1 second' FROM unnest(recent) t)"
        )
    assert [j.pk for j in Job.objects.claim("w2", limit=100)] == ids[10:]


def test_a_rate_window_left_by_finished_jobs_does_not_keep_workers_on_the_limited_claim():
    from django.db import connection as db

    from django_pgqueue import operations

    created = jobs.charge.enqueue(1)
    assert operations.limits_in_use(db)  # a limited job waits
    assert [j.pk for j in Job.objects.claim("w1", limit=10)] == [created.pk]
    Job.objects.filter(pk=created.pk).update(status="completed")
    assert RateWindow.objects.filter(pk="key:stripe").exists()  # its recent starts are kept
    assert not operations.limits_in_use(db)  # but the plain claim serves everyone again
    again = jobs.charge.enqueue(2)
    assert operations.limits_in_use(db)
    assert [j.pk for j in Job.objects.claim("w1", limit=10)] == [again.pk]


def test_concurrency_limit_gives_each_running_job_its_own_place():
    keyed = jobs.three_at_a_time.using(concurrency_key="tenant-1")
    created = [keyed.enqueue("control_probe", "t", 0).pk for _ in range(5)]
    claimed = Job.objects.claim("w1", limit=10)
    assert [j.pk for j in claimed] == created[:3]
    places = sorted(Job.objects.filter(status="running").values_list("concurrency_slot", flat=True))
    assert places == [0, 1, 2]
    assert Job.objects.claim("w2", limit=10) == []
    Job.objects.filter(pk=created[1]).update(status="completed")
    (next_job,) = Job.objects.claim("w2", limit=10)
    assert next_job.pk == created[3]
    assert Job.objects.get(pk=next_job.pk).concurrency_slot == 1  # the place it freed


def test_a_queue_concurrency_limit_counts_every_worker():
    limit_queue("limited", concurrency_limit=2)
    for i in range(4):
        jobs.add.using(queue="limited").enqueue(i, 1)
    other = jobs.add.enqueue(9, 9)
    assert len(Job.objects.claim("w1", limit=1)) == 1
    got = Job.objects.claim("w2", limit=10)
    assert sorted(j.queue for j in got) == ["default", "limited"]
    assert other.pk in {j.pk for j in got}
    assert Job.objects.claim("w3", limit=10) == []
    limit_queue("limited")  # no limits, not paused: no row
    assert not Queue.objects.exists()
    assert len(Job.objects.claim("w3", limit=10)) == 2


def test_the_command_sets_and_lists_limits(capsys):
    call_command("pgqueue_queue", "limit", "emails", "--concurrency", "4", "--rate", "100/m")
    row = Queue.objects.get(name="emails")
    assert (row.concurrency_limit, row.rate_limit) == (4, "100/m")
    assert (RateWindow.objects.get(pk="queue:emails").starts, 60.0) == (100, 60.0)
    call_command("pgqueue_queue", "list")
    assert "emails: running, concurrency limit 4, rate limit 100/m" in capsys.readouterr().out
    call_command("pgqueue_queue", "limit", "emails")
    assert not Queue.objects.exists() and not RateWindow.objects.exists()


def start_workers(processes: int = 2, threads: int = 4):
    proc = start_worker("--processes", str(processes), "--threads", str(threads), env=worker_env())
    try:
        wait_until(lambda: WorkerRow.objects.filter(stopped_at__isnull=True).count() == processes)
    except BaseException:
        stop(proc)  # never leave workers behind to take the next tests' jobs
        raise
    return proc


def test_concurrency_limit_3_holds_across_2_processes_of_4_threads(probe_table):
    for key in ("tenant-a", "tenant-b"):
        keyed = jobs.three_at_a_time.using(concurrency_key=key)
        keyed.enqueue_many([(probe_table, key, 0.3)] * 12)
    proc = start_workers()
    try:
        wait_until(lambda: len(runs(probe_table)) == 24, timeout=120)
    finally:
        text = stop(proc)
    by_key = runs_by_key(probe_table)
    for key, intervals in by_key.items():
        peak = most_overlapping(intervals)
        assert peak <= 3, (key, peak, text)
        assert peak >= 2, (key, peak)  # limits above one do run jobs side by side
    assert Counter(Job.objects.values_list("status", flat=True)) == Counter(completed=24)


def test_a_queue_concurrency_limit_holds_across_2_processes(probe_table):
    limit_queue("limited", concurrency_limit=2)
    jobs.probe.using(queue="limited").enqueue_many([(probe_table, "q", 0.3)] * 10)
    proc = start_workers()
    try:
        wait_until(lambda: len(runs(probe_table)) == 10, timeout=120)
    finally:
        stop(proc)
    assert most_overlapping([(s, e) for _, s, e in runs(probe_table)]) == 2


def test_rate_limit_10_per_second_across_2_processes(probe_table):
    jobs.charge.enqueue_many([(i, probe_table) for i in range(100)])
    proc = start_workers()
    try:
        # About five seconds of starts (50 jobs), then stop.
        wait_until(lambda: Job.objects.filter(status="completed").count() >= 45, timeout=120)
    finally:
        stop(proc)
    started = [s for _, s, _ in runs(probe_table)]  # each attempt's start, as the claim took it
    assert len(started) >= 45
    assert busiest_window(started) <= 10
    # The ones not started yet wait in their place, no attempt spent.
    waiting = Job.objects.filter(status="pending")
    assert not waiting.filter(attempts__gt=0).exists()
    assert Job.objects.filter(status="completed").count() + waiting.count() == 100
    first_waiting = waiting.order_by("id").first()
    assert first_waiting is not None
    assert not Job.objects.filter(status="completed", id__gt=first_waiting.pk + 20).exists()
