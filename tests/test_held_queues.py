"""A queue's own limits hold its backlog too (``sql.held``, ``0011_ready_held_queues``).

Jobs with neither key, of a queue with a concurrency or rate limit of its own, wait held
beyond the few rows the ring keeps of them; the limited claim that takes some puts as many
back. A claim never steps over more than those few, and the queue's jobs still run in order,
within its limits, each exactly once. Behaviour only, never timings.
"""

from __future__ import annotations

import time

import pytest

from django_pgqueue import limit_queue, operations, pause_queue, resume_queue
from django_pgqueue.models import Job
from django_pgqueue.sql import held as held_sql
from django_pgqueue.sql import limits as limits_sql
from tests.testapp import jobs
from tests.utils import (
    assert_worker_runs_backlog_in_order,
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
    wait_until,
    worker_env,
)

pytestmark = pytest.mark.django_db(transaction=True)

#: The ring rows a queue of concurrency limit 2 keeps once it is held.
KEPT = held_sql.KEPT_PER_KEY + 2 * 2


def rows_by_queue() -> dict[tuple[str, str], int]:
    """Ready rows per (queue, where)."""
    return ready_rows("queue")


def db() -> operations.DjangoDatabase:
    return operations.DjangoDatabase("default")


def claim(limit: int = 256) -> list[Job]:
    """The limited claim, as workers make it while a queue has settings, without the upkeep
    (which also holds and puts back rows)."""
    return claim_rows(db(), limit, reclaim=False)[0]


LIM = jobs.noop.using(queue="lim")


def test_a_limited_queues_backlog_waits_held_and_each_claim_puts_back_what_it_took():
    limit_queue("lim", concurrency_limit=2)
    expected = enqueue_backlog(LIM)
    free = jobs.noop.enqueue_many([()] * 5)
    operations.sweep_held(db())
    assert rows_by_queue() == {
        ("lim", "ring"): KEPT,
        ("lim", "held"): 100 - KEPT,
        ("default", "ring"): 5,
    }

    first = claim()
    assert sorted(j.pk for j in first if j.queue == "default") == sorted(free)
    ran = [j.pk for j in first if j.queue == "lim"]
    assert ran == expected[:2]
    # The claim put back as many held rows as it took: the ring still keeps the next KEPT.
    assert rows_by_queue() == {("lim", "ring"): KEPT, ("lim", "held"): 100 - KEPT - 2}
    assert claim() == []  # the queue is full: claims step over its KEPT rows only

    batch = [j for j in first if j.queue == "lim"]
    finish_completed([j for j in first if j.queue == "default"])
    while batch:
        finish_completed(batch)
        batch = claim()
        assert len(batch) <= 2  # the queue's limit
        ran += [j.pk for j in batch]
    assert ran == expected
    assert rows_by_queue() == {}


def test_a_rate_limited_queue_keeps_twice_its_windows_starts_in_the_ring():
    limit_queue("lim", rate_limit="10/s")
    kept = held_sql.KEPT_PER_KEY + 2 * 10
    expected = enqueue_backlog(LIM)
    operations.sweep_held(db())
    assert rows_by_queue() == {("lim", "ring"): kept, ("lim", "held"): 100 - kept}
    assert [j.pk for j in claim()] == expected[:10]  # the window's starts
    assert rows_by_queue() == {("lim", "ring"): kept, ("lim", "held"): 100 - kept - 10}
    assert claim() == []


def test_lifted_limits_put_every_held_row_back_a_batch_at_a_time():
    limit_queue("lim", concurrency_limit=2)
    enqueue_backlog(LIM)
    operations.sweep_held(db())
    limit_queue("lim")  # no limits: nothing to hold them for
    assert operations.sweep_held(db(), batch=50) == 50
    assert operations.sweep_held(db(), batch=50) == 100 - KEPT - 50
    assert rows_by_queue() == {("lim", "ring"): 100}


def test_the_upkeep_puts_back_rows_of_a_queue_whose_ring_rows_went_away():
    """Ready rows of jobs cancelled in the meantime are deleted by the claim, not run, and
    put nothing back: the upkeep tops the queue's ring rows up."""
    limit_queue("lim", concurrency_limit=2)
    expected = enqueue_backlog(LIM)
    operations.sweep_held(db())
    Job.objects.filter(pk__in=expected[:KEPT]).cancel()
    assert claim() == []
    assert rows_by_queue() == {("lim", "held"): 100 - KEPT}
    assert operations.sweep_held(db()) == KEPT
    assert [j.pk for j in claim()] == expected[KEPT : KEPT + 2]


def test_a_paused_limited_queue_keeps_its_held_rows_until_resumed():
    limit_queue("lim", concurrency_limit=2)
    expected = enqueue_backlog(LIM)
    operations.sweep_held(db())
    pause_queue("lim")
    operations.sweep_held(db())  # nothing of a paused queue is topped up or held
    assert rows_by_queue() == {("lim", "parked"): KEPT, ("lim", "held"): 100 - KEPT}
    resume_queue("lim")
    operations.sweep_held(db())
    assert rows_by_queue() == {("lim", "ring"): KEPT, ("lim", "held"): 100 - KEPT}
    assert [j.pk for j in claim()] == expected[:2]


def test_held_queue_rows_go_back_to_the_ring_through_the_migration_and_are_held_again():
    limit_queue("lim", concurrency_limit=2)
    enqueue_backlog(LIM)
    operations.sweep_held(db())
    with migrated_back_to("0010") as cursor:
        assert rows_by_queue() == {("lim", "ring"): 100}
        cursor.execute("SELECT to_regclass(%s)", [limits_sql.QUEUE_HELD_INDEX])
        assert cursor.fetchone()[0] is None
    operations.sweep_held(db())
    assert rows_by_queue() == {("lim", "ring"): KEPT, ("lim", "held"): 100 - KEPT}


@pytest.mark.slow  # long, processes only: once, on the newest Django
def test_a_worker_holds_a_limited_queues_backlog_and_runs_it_in_order(probe_table):
    limit_queue("lim", concurrency_limit=1)
    assert_worker_runs_backlog_in_order(
        probe_table,
        jobs.probe.using(queue="lim"),
        lambda: rows_by_queue().get(("lim", "held"), 0) > 0,
    )


@pytest.mark.slow  # long, processes only: once, on the newest Django
def test_a_limited_queues_backlog_under_load_runs_every_job_once_within_its_limit(probe_table):
    """Two worker processes, two producers enqueueing into a queue limited to 3 while the
    workers hold, put back and run its rows: every job runs exactly once, never more than 3
    at once, and no ready row is left behind."""
    limit_queue("lim", concurrency_limit=3)
    held_before = rows_ever_held()
    proc = start_worker("--processes", "2", "--threads", "3", env=worker_env())
    try:

        def produce(index: int) -> None:
            lim = jobs.probe.using(queue="lim")
            for _ in range(10):
                lim.enqueue_many([(probe_table, "lim", 0.002)] * 20)
                jobs.probe.enqueue_many([(probe_table, f"free{index}", 0.002)] * 5)
                time.sleep(0.02)

        run_threads(2, produce)
        wait_until(lambda: len(runs(probe_table)) == 500, timeout=180)
    finally:
        text = stop(proc)
    by_key = runs_by_key(probe_table)
    assert {key: len(v) for key, v in by_key.items()} == {
        "lim": 400,
        "free0": 50,
        "free1": 50,
    }, text
    assert most_overlapping(by_key["lim"]) <= 3
    assert not Job.objects.exclude(status="completed").exists()
    assert rows_by_queue() == {}
    wait_until(lambda: rows_ever_held() > held_before)  # the backlog was held on the way


def test_a_large_rate_windows_backlog_is_held_too():
    """The ring keeps 1,000 starts' worth of a window's rows at most: a 100000/d queue once
    kept 200,008, and every claim stepped over them once its window was full."""
    limit_queue("big", rate_limit="100000/d")
    jobs.noop.using(queue="big").enqueue_many([()] * 5000)
    operations.sweep_held(db())
    kept = held_sql.KEPT_PER_KEY + 2 * held_sql.WINDOW_KEPT_MAX
    assert rows_by_queue() == {("big", "ring"): kept, ("big", "held"): 5000 - kept}
