"""The ready ring (``sql.ready``): where claims find jobs, bounded under a pinned xmin horizon.

Behaviour only: row counts, relation sizes and catalog state, never timings.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.models import Job
from django_pgqueue.queues import pause_queue
from django_pgqueue.sql import ready
from django_pgqueue.worker.connection import QueueConnection
from tests.testapp import jobs
from tests.utils import claim_and_finish_all, claim_rows, migrated_back_to, run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def slot_counts() -> dict[int, int]:
    return operations.slot_counts(operations.DjangoDatabase("default"))


def plain_claim(db=None, limit=10, queues=None, path=None):
    """The claim while no queue has settings and no limited job waits (or while ``path``, a
    worker's reading, says so): the plain one. The limited one reads the ring too."""
    db = db or operations.DjangoDatabase("default")
    return claim_rows(db, limit, queues, path=path)[0]


def relation_pages(name: str, *, total: bool = True) -> int:
    """Pages of a table and all its indexes (``total``), or of the table alone."""
    size = "pg_total_relation_size" if total else "pg_relation_size"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {size}(%s::regclass) / 8192", [name])
        return int(cursor.fetchone()[0])


@pytest.fixture
def queue_connection():
    conn = QueueConnection("default", "pgqueue test ring")
    yield conn
    conn.close()


def test_every_pending_job_has_one_ready_row_and_scheduled_ones_wait_in_later():
    now = timezone.now()
    due = jobs.noop.enqueue_many([()] * 5)
    later = jobs.noop.using(run_after=now + timedelta(hours=1)).enqueue()
    assert sum(n for s, n in slot_counts().items() if s >= 0) == 5
    assert slot_counts().get(ready.LATER_SLOT) == 1

    claimed = plain_claim()
    assert sorted(j.pk for j in claimed) == sorted(due)
    assert sum(n for s, n in slot_counts().items() if s >= 0) == 0, "the claim took its rows"

    # Run now: the scheduled job moves from later into the ring and is claimed.
    Job.objects.filter(pk=later.pk).run_now()
    assert ready.LATER_SLOT not in slot_counts()
    assert [j.pk for j in plain_claim()] == [later.pk]


def test_a_due_scheduled_job_is_promoted_by_the_claim():
    created = jobs.noop.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
    assert plain_claim() == []
    # Its time comes (set back by hand, as the clock would): the claim promotes it.
    Job.objects.filter(pk=created.pk).update(run_after=timezone.now() - timedelta(seconds=1))
    assert [j.pk for j in plain_claim()] == [created.pk]


def test_a_cancelled_jobs_ready_row_is_dropped_without_running_it(queue_connection):
    cancelled, kept = jobs.noop.enqueue(), jobs.noop.enqueue()
    assert Job.objects.filter(pk=cancelled.pk).cancel() == 1
    assert [j.pk for j in plain_claim(queue_connection)] == [kept.pk]
    assert sum(n for s, n in slot_counts().items() if s >= 0) == 0
    assert Job.objects.get(pk=cancelled.pk).status == "cancelled"


def test_retried_and_released_jobs_get_their_ready_rows_back(queue_connection):
    created = jobs.noop.enqueue()
    [job] = plain_claim()
    assert operations.release(queue_connection, "w", [job]) == {job.pk}
    [again] = plain_claim()
    assert again.pk == created.pk
    Job.objects.filter(pk=created.pk).update(status="dead", finished_at=timezone.now())
    assert Job.objects.filter(pk=created.pk).retry() == [created.pk]
    assert [j.pk for j in plain_claim()] == [created.pk]


@pytest.mark.parametrize("controlled", [False, True], ids=["plain", "limited"])
def test_a_pinned_horizon_leaves_the_claim_path_bounded(
    other_connection, queue_connection, controlled
):
    """A second connection keeps an XID (idle in transaction) while three slots' worth of jobs
    are enqueued, claimed and finished: the slots left behind are truncated anyway, so the
    ring's size stays that of a few slots, while the job table's own claim index grows. The
    limited claim (some queue paused) reads the ring the same way."""
    if controlled:
        pause_queue("elsewhere")
    with other_connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT txid_current()")
    try:
        total = 3 * ready.SLOT_SPAN
        claim_index_before = relation_pages("pgqueue_job_claim_queue")
        for _ in range(total // 1024):
            jobs.noop.enqueue_many([()] * 1024)
            claim_and_finish_all(queue_connection)
            operations.recycle(queue_connection)
        assert Job.objects.filter(status="completed").count() == total

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT state, backend_xid IS NOT NULL FROM pg_stat_activity WHERE pid = %s",
                [other_connection.connection.info.backend_pid],
            )
            assert cursor.fetchone() == ("idle in transaction", True), "the XID is still open"

        # Every slot but the one being written was truncated: empty, no pages at all.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT (coalesce(pg_sequence_last_value("
                "pg_get_serial_sequence('pgqueue_job', 'id')), 0) / %s) %% %s",
                [ready.SLOT_SPAN, ready.RING_SLOTS],
            )
            current = cursor.fetchone()[0]
        truncated = [
            s
            for s in range(ready.RING_SLOTS)
            if s != current and relation_pages(ready.slot_table(s), total=False) == 0
        ]
        assert len(truncated) == ready.RING_SLOTS - 1, truncated
        # The job table's pending index kept every dead entry (nothing could vacuum it); the
        # ring holds at most the slot being written, and no live row.
        assert relation_pages("pgqueue_job_claim_queue") > claim_index_before + 10
        assert sum(slot_counts().values()) == 0
    finally:
        with other_connection.cursor() as cursor:
            cursor.execute("ROLLBACK")


def test_the_worker_stale_scan_starts_where_the_last_one_ended(queue_connection):
    scan = operations.StaleScan(margin=5.0, full_every=3600.0)
    old = jobs.noop.enqueue()
    [claimed] = Job.objects.claim("dead-worker")
    assert claimed.pk == old.pk
    # The first scan of a worker is a full one; nothing is stale yet.
    assert claim_rows(queue_connection, stale_scan=scan) == (
        [],
        0,
    )
    assert scan.since is not None
    # A lock set back behind where the scans start is left to the periodic full scan...
    Job.objects.filter(pk=old.pk).update(locked_at=timezone.now() - timedelta(days=1))
    assert claim_rows(queue_connection, stale_scan=scan)[1] == 0
    # ... which finds it.
    scan.full_every = 0.0
    jobs_taken, taken = claim_rows(queue_connection, stale_scan=scan)
    assert taken == 1 and [j.pk for j in jobs_taken] == [old.pk]
    # A job whose worker stops heartbeating now is found by the bounded scan once stale.
    fresh = jobs.noop.enqueue()
    Job.objects.claim("dead-worker")
    Job.objects.filter(pk=fresh.pk).update(locked_at=timezone.now() - timedelta(seconds=61))
    scan.full_every = 3600.0
    scan.since = timezone.now() - timedelta(seconds=120)
    jobs_taken, _ = claim_rows(queue_connection, stale_scan=scan)
    assert [j.pk for j in jobs_taken] == [fresh.pk]


def test_a_table_made_by_0_1_keeps_every_job_through_the_migration():
    """Rows written with the 0.1 schema (no ring) survive the migration and run."""
    with migrated_back_to("0001_initial") as cursor:
        cursor.execute("SELECT to_regclass('pgqueue_ready')")
        assert cursor.fetchone()[0] is None
        cursor.execute(
            "INSERT INTO pgqueue_job (queue, name, args, kwargs, run_after) VALUES "
            "('default', 'tests.testapp.jobs.add', '[1, 2]', '{}', now()), "
            "('default', 'tests.testapp.jobs.add', '[3, 4]', '{}', now() - interval '1 day'),"
            "('default', 'tests.testapp.jobs.add', '[5, 6]', '{}', now() + interval '1 hour')"
        )
        cursor.execute(
            "INSERT INTO pgqueue_job (queue, name, status, attempts, locked_at, locked_by, "
            "started_at) VALUES ('default', 'tests.testapp.jobs.noop', 'running', 1, "
            "now() - interval '1 day', 'gone-worker', now() - interval '1 day')"
        )
    assert Job.objects.count() == 4
    assert sum(slot_counts().values()) == 3, "every pending job has its ready row"
    assert slot_counts()[ready.LATER_SLOT] == 1, "the scheduled one waits in later"
    # Its time comes (set back by hand, as the clock would).
    Job.objects.filter(args=[5, 6]).update(run_after=timezone.now() - timedelta(seconds=1))
    result = run_worker("-v", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {tuple(j.args): (j.status, j.result) for j in Job.objects.exclude(name__endswith="noop")}
    assert rows == {(1, 2): ("completed", 3), (3, 4): ("completed", 7), (5, 6): ("completed", 11)}
    lost = Job.objects.get(name__endswith="noop")
    assert (lost.status, lost.attempts) == ("completed", 2), "the 0.1 running job was reclaimed"


def test_ready_rows_of_0_6_get_the_limits_of_their_jobs_through_the_migration():
    """Pending limited jobs enqueued before 0007 (ready rows without a rate key or a
    concurrency limit) get them, so the limited claim, now reading the ring, keeps their
    limits: a concurrency limit of 2 runs two of three at once, a rate-limited job waits for
    the limited claim instead of being taken by the plain one (which a worker whose reading
    is stale still makes)."""
    db = operations.DjangoDatabase("default")
    stale = operations.ClaimPath(max_age=math.inf)
    assert not stale.read(db)  # read before the limited jobs came
    with migrated_back_to("0006") as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (queue, name, args, kwargs, run_after, "
            "concurrency_key, concurrency_limit) SELECT 'default', "
            "'tests.testapp.jobs.noop', '[]', '{}', now(), 'k', 2 FROM generate_series(1, 3)"
        )
        cursor.execute(
            "INSERT INTO pgqueue_job (queue, name, args, kwargs, run_after, rate_key) "
            "VALUES ('default', 'tests.testapp.jobs.add', '[1, 2]', '{}', now(), 'r')"
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE concurrency_limit = 2), "
            "count(*) FILTER (WHERE rate_key = 'r') FROM pgqueue_ready"
        )
        assert cursor.fetchone() == (3, 1)
    assert operations.limited_claim_needed(db)
    assert [j.name for j in plain_claim(limit=10, path=stale)] == ["tests.testapp.jobs.noop"], (
        "the plain claim runs one job per key and leaves the rate-limited job alone"
    )
    Job.objects.filter(status="running").update(status="pending")  # hand it back
    got = claim_rows(db)[0]
    assert (
        sorted(j.name for j in got) == ["tests.testapp.jobs.add"] + ["tests.testapp.jobs.noop"] * 2
    )
    assert sorted(j.concurrency_place for j in got if j.concurrency_key) == [0, 1]


def test_a_job_committed_after_the_claim_began_is_claimed_not_dropped(other_connection):
    """The claim's transaction may start before a job's own (its run_after) and still see it
    committed: the job is due, and its ready row must not be thrown away as not due yet."""
    from django.db import transaction

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")  # this transaction's now() is fixed here
        with other_connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO pgqueue_job (queue, name) VALUES ('default', "
                "'tests.testapp.jobs.noop') RETURNING id"
            )
            created = cursor.fetchone()[0]
        claimed = plain_claim()
    assert [j.pk for j in claimed] == [created]


@pytest.mark.parametrize("controlled", [False, True])
@pytest.mark.parametrize("queues", [None, ["default", "other"]])
def test_the_idle_wake_up_reads_the_ring(queue_connection, queues, controlled):
    def next_run():
        return operations.next_run_after(queue_connection, queues, controlled=controlled)

    assert next_run() == (False, None)
    later = timezone.now() + timedelta(hours=1)
    jobs.noop.using(run_after=later).enqueue()
    ready_now, at = next_run()
    assert not ready_now and abs((at - later).total_seconds()) < 0.001, "the later partition's"
    jobs.noop.enqueue()
    ready_now, at = next_run()
    assert ready_now and abs((at - later).total_seconds()) < 0.001, "a ring row, and the later"
    jobs.noop.using(queue="elsewhere").enqueue()
    plain_claim(queues=["default"])
    ready_now, at = next_run()
    assert ready_now == (queues is None), "the other queue's ring row counts for all queues"
    assert abs((at - later).total_seconds()) < 0.001


def test_an_idle_worker_promotes_only_for_scheduled_jobs(queue_connection):
    """A ring row the claim could not take (locked, or waiting for its key) is claimed by a
    plain claim; only a scheduled job, due, calls for the upkeep that promotes it."""
    from django_pgqueue.worker.claims import BLOCKED_RECHECK, Claimer

    claimer = Claimer(queue_connection, "w", ["default"], burst=False)
    far = time.monotonic() + 7200
    claimer.next_reclaim = far
    claimer.next_repair = far  # its first repair round would wake it within 2 s
    jobs.noop.enqueue()  # in the ring, as if a claim had skipped it
    assert claimer.idle_until() <= time.monotonic() + BLOCKED_RECHECK
    assert claimer.next_reclaim == far, "no promotion asked for a ring row"

    jobs.noop.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
    assert claimer.idle_until() <= time.monotonic() + BLOCKED_RECHECK, "the ring row first"
    assert claimer.next_reclaim < far - 1800, "an upkeep when the scheduled job is due"
    claimer.next_reclaim = far
    plain_claim(queue_connection, queues=["default"])
    assert claimer.idle_until() > time.monotonic() + BLOCKED_RECHECK, "sleeps"
    assert claimer.next_reclaim < far - 1800, "an upkeep when the scheduled job is due"
    with connection.cursor() as cursor:  # due now, not promoted yet
        cursor.execute(
            "UPDATE pgqueue_ready SET run_after = now() - interval '1 second' WHERE slot = %s",
            [ready.LATER_SLOT],
        )
    claimer.next_reclaim = far
    assert claimer.idle_until() <= time.monotonic() + BLOCKED_RECHECK
    assert claimer.next_reclaim <= time.monotonic(), "the next claim promotes it"


def test_a_slot_holding_jobs_no_worker_serves_is_truncated_all_the_same(queue_connection):
    """Pending jobs of a queue nobody serves move on with the ring instead of pinning their
    slot (which would otherwise gather every dead tuple of the ids that come round to it)."""
    idle = jobs.noop.using(queue="nobody-serves-this").enqueue_many([()] * 3)
    first_slot = (idle[0] // ready.SLOT_SPAN) % ready.RING_SLOTS
    # Move the inserts on past that slot: a slot's worth of jobs, claimed and finished.
    for _ in range(ready.SLOT_SPAN // 1024 + 1):
        jobs.noop.enqueue_many([()] * 1024)
        claim_and_finish_all(queue_connection, queues=["default"])
    assert first_slot in operations.recycle(queue_connection)
    assert relation_pages(ready.slot_table(first_slot), total=False) == 0
    # The three jobs kept their ready rows, elsewhere, and still run.
    assert sum(slot_counts().values()) == 3
    claimed = plain_claim(queue_connection, 10, ["nobody-serves-this"])
    assert sorted(j.pk for j in claimed) == sorted(idle)
