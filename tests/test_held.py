"""A busy key's backlog waits held, out of the ready ring (``sql.held``, ``0009``).

A claim never steps over more than a few rows of a busy concurrency key or a full rate window,
and the key's jobs still run in order, within their limits, each exactly once. Behaviour
only: where rows are, what claims take, what runs; never timings.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_pgqueue import operations
from django_pgqueue.models import Job
from django_pgqueue.sql import held as held_sql
from django_pgqueue.sql import ready
from tests.testapp import jobs
from tests.utils import (
    assert_worker_runs_backlog_in_order,
    busiest_window,
    claim_rows,
    enqueue_backlog,
    finish_completed,
    migrated_back_to,
    most_overlapping,
    ready_rows,
    rows_ever_held,
    run_threads,
    runs,
    runs_by_key,
    start_worker,
    stop,
    truncated_once_inserts_move_past,
    wait_until,
    worker_env,
)

pytestmark = pytest.mark.django_db(transaction=True)

#: The ring rows a key of concurrency limit 1 keeps once it is held.
KEPT = held_sql.KEPT_PER_KEY + 2
#: The same for the rate key of ``jobs.charge`` (10 starts a second).
KEPT_RATE = held_sql.KEPT_PER_KEY + 2 * 10


def rows_by_key() -> dict[tuple[str | None, str], int]:
    """Ready rows per (concurrency key, where)."""
    return ready_rows("concurrency_key")


def db() -> operations.DjangoDatabase:
    return operations.DjangoDatabase("default")


def claim(limit: int = 256) -> list[Job]:
    """The claim, without the upkeep (which also holds and puts back rows)."""
    return claim_rows(db(), limit, reclaim=False)[0]


def keyed(key: str = "k", priority: int = 0):
    return jobs.noop.using(concurrency_key=key, priority=priority)


def test_a_busy_keys_backlog_waits_held_and_runs_in_order_exactly_once():
    keyed().enqueue()
    [running] = claim()
    expected = enqueue_backlog(keyed())
    free = jobs.noop.enqueue_many([()] * 5)
    operations.sweep_held(db())
    assert rows_by_key() == {("k", "ring"): KEPT, ("k", "held"): 100 - KEPT, (None, "ring"): 5}

    # The key is busy: claims take the other jobs and step over only the key's kept rows.
    assert sorted(j.pk for j in claim()) == sorted(free)
    # The key's next held row takes the finished job's place in the ring.
    finish_completed([running])
    assert rows_by_key() == {("k", "ring"): KEPT + 1, ("k", "held"): 100 - KEPT - 1}

    ran: list[int] = []
    while batch := claim():
        assert len(batch) == 1  # one at a time: the key's limit
        ran += [j.pk for j in batch]
        finish_completed(batch)
    assert ran == expected
    assert rows_by_key() == {}


def test_the_upkeep_holds_a_batch_at_a_time_and_leaves_a_key_near_its_kept_rows_alone():
    keyed("few").enqueue_many([()] * 2 * KEPT)
    keyed("many").enqueue_many([()] * (2 * KEPT + 1 + 30))
    assert operations.sweep_held(db(), batch=20) == 0, "nothing goes back to the ring"
    assert rows_by_key() == {
        ("few", "ring"): 2 * KEPT,
        ("many", "ring"): 2 * KEPT + 1 + 10,
        ("many", "held"): 20,
    }
    operations.sweep_held(db(), batch=20)
    settled = {("few", "ring"): 2 * KEPT, ("many", "ring"): KEPT + 1, ("many", "held"): 40}
    assert rows_by_key() == settled
    operations.sweep_held(db(), batch=20)  # not more than twice the kept rows: left alone
    assert rows_by_key() == settled


def test_the_upkeep_sweeps_only_when_a_key_or_a_held_row_is_in_sight():
    def swept() -> bool:
        with CaptureQueriesContext(connection) as queries:
            operations.sweep_held(db())
        return any("held_groups" in q["sql"] for q in queries.captured_queries)

    jobs.noop.enqueue_many([()] * (2 * KEPT + 1))  # no key, no limited queue: nothing to do
    assert not swept()
    keyed().enqueue_many([()] * (2 * KEPT + 1))
    assert swept()
    assert rows_by_key()[("k", "held")] == KEPT + 1


def test_the_upkeep_puts_back_rows_of_a_key_whose_ring_rows_went_away():
    """Ready rows of jobs cancelled in the meantime are deleted by the claim, not run: with
    nothing of the key running, no finish puts its next held row back, the upkeep does."""
    expected = enqueue_backlog(keyed())
    operations.sweep_held(db())
    Job.objects.filter(pk__in=expected[:KEPT]).cancel()
    assert claim() == []  # deletes the cancelled jobs' rows; the key has nothing in the ring
    assert rows_by_key() == {("k", "held"): 100 - KEPT}
    assert operations.sweep_held(db()) == KEPT
    assert [j.pk for j in claim()] == [expected[KEPT]]


def test_a_full_rate_windows_backlog_waits_held_and_each_start_comes_back():
    """Rows of a rate key are held like those of a concurrency key, by their window's size:
    each finished job puts one back, and the upkeep tops the ring up while started jobs run
    long, so the window's starts are never short of rows."""
    charges = jobs.charge.enqueue_many([(i,) for i in range(100)])
    operations.sweep_held(db())
    assert rows_by_key() == {(None, "ring"): KEPT_RATE, (None, "held"): 100 - KEPT_RATE}
    started = claim()
    assert [j.pk for j in started] == charges[:10]  # the window's 10 starts
    assert claim() == []  # the window is full: nothing more to take
    assert operations.sweep_held(db()) == 10  # still running: topped up by the upkeep
    assert rows_by_key() == {(None, "ring"): KEPT_RATE, (None, "held"): 90 - KEPT_RATE}
    finish_completed(started)  # and each finish puts one back
    assert rows_by_key() == {(None, "ring"): KEPT_RATE + 10, (None, "held"): 80 - KEPT_RATE}


def test_a_held_job_changed_deleted_or_finished_leaves_no_stray_row():
    keyed().enqueue()
    [running] = claim()
    expected = enqueue_backlog(keyed())
    operations.sweep_held(db())
    # A held job given the top priority: its held row is replaced by a ring row.
    urgent, gone = expected[-1], expected[-2]
    Job.objects.filter(pk=urgent).update(priority=100)
    Job.objects.filter(pk=gone).delete()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, slot >= 0 FROM pgqueue_ready WHERE job_id IN (%s, %s)", [urgent, gone]
        )
        assert cursor.fetchall() == [(urgent, True)]
    assert rows_by_key() == {("k", "ring"): KEPT + 1, ("k", "held"): 100 - KEPT - 2}
    # A running job of the key deleted as it finishes (results not kept) puts one back too.
    finish_completed([running], delete=True)
    assert rows_by_key() == {("k", "ring"): KEPT + 2, ("k", "held"): 100 - KEPT - 3}
    ran: list[int] = []
    while batch := claim():
        ran += [j.pk for j in batch]
        finish_completed(batch)
    assert ran[0] == urgent
    assert sorted(ran) == sorted(set(expected) - {gone})
    assert rows_by_key() == {}


def test_a_slot_holding_a_busy_keys_backlog_is_truncated_all_the_same():
    """A busy key's backlog (more rows than recycling moves on) no longer pins its ring slot:
    the slot is truncated once the inserts move past and its other jobs are claimed, whatever
    the xmin horizon, and the backlog runs once the key is free."""
    keyed().enqueue()
    [running] = claim()
    backlog = keyed().enqueue_many([()] * (ready.STRAGGLERS + 100))
    first_slot = (backlog[0] // ready.SLOT_SPAN) % ready.RING_SLOTS
    truncated_once_inserts_move_past(first_slot)  # the upkeep on the way holds the backlog
    assert rows_by_key() == {("k", "ring"): KEPT, ("k", "held"): len(backlog) - KEPT}
    finish_completed([running])
    ran: list[int] = []
    while batch := claim():
        ran += [j.pk for j in batch]
        finish_completed(batch)
    assert ran == backlog


def test_held_rows_go_back_to_the_ring_through_the_migration_and_are_held_again():
    keyed().enqueue_many([()] * 50)
    operations.sweep_held(db())
    assert rows_by_key() == {("k", "ring"): KEPT, ("k", "held"): 50 - KEPT}
    with migrated_back_to("0008") as cursor:
        assert rows_by_key() == {("k", "ring"): 50}
        cursor.execute("SELECT to_regclass(%s)", [ready.HELD_TABLE])
        assert cursor.fetchone()[0] is None
    operations.sweep_held(db())
    assert rows_by_key() == {("k", "ring"): KEPT, ("k", "held"): 50 - KEPT}


def test_a_worker_holds_a_keys_backlog_and_runs_it_one_at_a_time_in_order(probe_table):
    assert_worker_runs_backlog_in_order(
        probe_table,
        jobs.probe.using(concurrency_key="t"),
        lambda: rows_by_key().get(("t", "held"), 0) > 0,
    )


@pytest.mark.slow  # long, processes only: once, on the newest Django
def test_a_worker_runs_a_held_rate_backlog_within_its_rate(probe_table):
    rate = 25
    kept = held_sql.KEPT_PER_KEY + 2 * rate
    charge = jobs.charge.using(rate_limit=f"{rate}/s", rate_key="held-rate")
    created = charge.enqueue_many([(i, probe_table) for i in range(2 * kept + 10)])
    operations.sweep_held(db())
    assert rows_by_key() == {(None, "ring"): kept, (None, "held"): len(created) - kept}
    proc = start_worker("--threads", "4", env=worker_env())
    try:
        wait_until(lambda: len(runs(probe_table)) == len(created), timeout=120)
    finally:
        text = stop(proc)
    started = [s for _, s, _ in runs(probe_table)]
    assert busiest_window(started) <= rate, text
    assert not Job.objects.exclude(status="completed").exists()
    assert rows_by_key() == {}


@pytest.mark.slow  # long, processes only: once, on the newest Django
def test_keyed_backlogs_under_load_run_every_job_once_within_their_limits(probe_table):
    """Two worker processes, two producers enqueueing into three keys (one of limit 3) while
    the workers hold, put back and run their rows: every job runs exactly once, no key runs
    more jobs at once than its limit, and no ready row is left behind."""
    held_before = rows_ever_held()
    proc = start_worker("--processes", "2", "--threads", "3", env=worker_env())
    try:

        def produce(index: int) -> None:
            for _ in range(10):
                for key in ("a", "b"):
                    jobs.probe.using(concurrency_key=f"{key}{index}").enqueue_many(
                        [(probe_table, f"{key}{index}", 0.002)] * 10
                    )
                jobs.three_at_a_time.using(concurrency_key="c").enqueue_many(
                    [(probe_table, "c", 0.002)] * 10
                )
                time.sleep(0.02)

        run_threads(2, produce)
        wait_until(lambda: len(runs(probe_table)) == 600, timeout=180)
    finally:
        text = stop(proc)
    by_key = runs_by_key(probe_table)
    assert {key: len(v) for key, v in by_key.items()} == {
        "a0": 100,
        "b0": 100,
        "a1": 100,
        "b1": 100,
        "c": 200,
    }, text
    for key, intervals in by_key.items():
        assert most_overlapping(intervals) <= (3 if key == "c" else 1), key
    assert not Job.objects.exclude(status="completed").exists()
    assert rows_by_key() == {}
    wait_until(lambda: rows_ever_held() > held_before)  # the backlogs were held on the way


def test_a_keys_backlog_in_two_queues_runs_in_the_one_not_paused(probe_table):
    """The held rows of a key whose jobs are in two queues, one paused: the other queue's jobs
    all run (the paused queue's held rows first in line once stopped the key for good)."""
    from django_pgqueue import pause_queue

    handle = jobs.probe.using(concurrency_key="k")
    ids = {}
    for n in range(4 * KEPT):  # "paused"'s jobs first in line
        queue = "paused" if n < 2 * KEPT else "served"
        ids[handle.using(queue=queue).enqueue(probe_table, queue, 0.0).pk] = queue
    operations.sweep_held(db())  # the upkeep holds the backlog beyond its first KEPT
    assert rows_by_key()[("k", "held")] == 3 * KEPT
    pause_queue("paused")  # its ring rows are parked: no "served" job is left in the ring
    worker = start_worker("--queue", "served", env=worker_env(PGQUEUE_POLL_INTERVAL="0.2"))
    try:
        served = [pk for pk, queue in ids.items() if queue == "served"]
        wait_until(lambda: not Job.objects.filter(pk__in=served, status="pending").exists())
    finally:
        stop(worker)
    assert set(Job.objects.filter(queue="paused").values_list("status", flat=True)) == {"pending"}
