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


def test_a_job_kept_waiting_keeps_its_place_and_spends_no_attempt():
    ids = [jobs.charge.enqueue(i).pk for i in range(15)]
    assert RateWindow.objects.get(pk="key:stripe").starts == 10
    first = Job.objects.claim("w1", limit=100)
    assert [j.pk for j in first] == ids[:10]  # the first ten, in order
    assert Job.objects.claim("w2", limit=100) == []  # the window is full
    waiting = Job.objects.filter(pk__in=ids[10:])
    assert set(waiting.values_list("status", "attempts")) == {("pending", 0)}
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
    assert operations.limited_claim_needed(db)  # a limited job waits
    assert [j.pk for j in Job.objects.claim("w1", limit=10)] == [created.pk]
    Job.objects.filter(pk=created.pk).update(status="completed")
    assert RateWindow.objects.filter(pk="key:stripe").exists()  # its recent starts are kept
    assert not operations.limited_claim_needed(db)  # but the plain claim serves everyone again
    again = jobs.charge.enqueue(2)
    assert operations.limited_claim_needed(db)
    assert [j.pk for j in Job.objects.claim("w1", limit=10)] == [again.pk]


def test_concurrency_limit_gives_each_running_job_its_own_place():
    keyed = jobs.three_at_a_time.using(concurrency_key="tenant-1")
    created = [keyed.enqueue("control_probe", "t", 0).pk for _ in range(5)]
    claimed = Job.objects.claim("w1", limit=10)
    assert [j.pk for j in claimed] == created[:3]
    places = sorted(
        Job.objects.filter(status="running").values_list("concurrency_place", flat=True)
    )
    assert places == [0, 1, 2]
    assert Job.objects.claim("w2", limit=10) == []
    Job.objects.filter(pk=created[1]).update(status="completed")
    (next_job,) = Job.objects.claim("w2", limit=10)
    assert next_job.pk == created[3]
    assert Job.objects.get(pk=next_job.pk).concurrency_place == 1  # the place it freed


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


@pytest.mark.slow  # long, processes only: once, on the newest Django
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


@pytest.mark.slow  # long, processes only: once, on the newest Django
def test_a_queue_concurrency_limit_holds_across_2_processes(probe_table):
    limit_queue("limited", concurrency_limit=2)
    jobs.probe.using(queue="limited").enqueue_many([(probe_table, "q", 0.3)] * 10)
    proc = start_workers()
    try:
        wait_until(lambda: len(runs(probe_table)) == 10, timeout=120)
    finally:
        stop(proc)
    assert most_overlapping([(s, e) for _, s, e in runs(probe_table)]) == 2


@pytest.mark.slow  # long, processes only: once, on the newest Django
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


def set_window(window: str, *ages_and_counts: tuple[float, int]) -> None:
    """The window's buckets: (seconds ago, starts) each."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_rate_window SET recent = "
            "ARRAY(SELECT statement_timestamp() - make_interval(secs => a) FROM unnest(%s) a), "
            "counts = %s WHERE id = %s",
            [[a for a, _ in ages_and_counts], [n for _, n in ages_and_counts], window],
        )


def test_a_large_rate_window_counts_per_hundredth_of_its_period():
    """1000/h keeps no 1,000 timestamps: 36-second buckets. A bucket counts whole while it
    ends after the hour began, so no hour ever holds more than 1,000 starts."""
    limit_queue("reports", rate_limit="1000/h")
    ids = [jobs.noop.using(queue="reports").enqueue().pk for _ in range(5)]
    set_window("queue:reports", (3000, 999))
    assert [j.pk for j in Job.objects.claim("w", ["reports"], 10)] == ids[:1]
    window = RateWindow.objects.get(pk="queue:reports")
    assert len(window.recent) == len(window.counts) == 2 and sum(window.counts) == 1000
    # A bucket that began 3,610 s ago may hold starts of the last hour: it still counts.
    set_window("queue:reports", (3610, 1000))
    assert Job.objects.claim("w", ["reports"], 10) == []
    # One that began more than an hour and a bucket ago does not.
    set_window("queue:reports", (3640, 1000))
    assert [j.pk for j in Job.objects.claim("w", ["reports"], 10)] == ids[1:]
    assert RateWindow.objects.get(pk="queue:reports").counts == [4]


def test_a_bucketed_rate_limit_holds_in_every_window():
    """300/s (10 ms buckets), claimed as fast as one connection can for two seconds: no
    second ever holds more than 300 starts, and the window stays about a hundred entries."""
    import time

    limit_queue("fast", rate_limit="300/s")
    jobs.noop.using(queue="fast").enqueue_many([()] * 1000)
    started = []
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        started += [j.started_at.timestamp() for j in Job.objects.claim("w", ["fast"], 100)]
    assert len(started) > 300
    assert busiest_window(started) <= 300
    assert len(RateWindow.objects.get(pk="queue:fast").recent) <= 102


def test_a_claim_waits_only_for_the_limits_it_counts(other_connection):
    """A claim locks the limits of its candidates only: while another transaction has queue
    "a"'s locked, a claim of queue "b" goes ahead (every limited claim once took every limit's
    lock, so claims of unrelated limits waited on each other)."""
    limit_queue("a", rate_limit="10/s")
    limit_queue("b", rate_limit="10/s")
    jobs.noop.using(queue="a").enqueue()
    wanted = jobs.noop.using(queue="b").enqueue()
    with other_connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended('pgqueue-limit:queue:a', 0))")
        try:
            with connection.cursor() as mine:
                mine.execute("SET lock_timeout = '10s'")  # a deadline against a hang
            assert [j.pk for j in Job.objects.claim("w", ["b"], 10)] == [wanted.pk]
        finally:
            cursor.execute("ROLLBACK")
            with connection.cursor() as mine:
                mine.execute("RESET lock_timeout")
