"""Jobs of paused queues wait parked, out of the ready ring (``sql.ready``, ``0008``).

A claim never steps over a paused queue's backlog, and a ring slot is never kept from being
truncated by it. Behaviour only: where rows are, what claims take, what runs; never timings.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue import operations, pause_queue, resume_queue
from django_pgqueue.models import Job
from django_pgqueue.sql import parked as parked_sql
from django_pgqueue.sql import ready
from tests.testapp import jobs
from tests.utils import (
    claim_rows,
    migrated_back_to,
    run_threads,
    start_worker,
    stop,
    truncated_once_inserts_move_past,
    wait_until,
    worker_env,
)

pytestmark = pytest.mark.django_db(transaction=True)

PARKED = ready.PARKED_SLOT


def rows_by_queue() -> dict[tuple[str, str], int]:
    """Ready rows per (queue, where): ``ring``, ``later`` or ``parked``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT queue, CASE slot WHEN %s THEN 'later' WHEN %s THEN 'parked' ELSE 'ring' END, "
            "count(*) FROM pgqueue_ready GROUP BY 1, 2",
            [ready.LATER_SLOT, PARKED],
        )
        return {(queue, where): count for queue, where, count in cursor.fetchall()}


def db() -> operations.DjangoDatabase:
    return operations.DjangoDatabase("default")


def claim(queues=None, limit=50):
    """The claim a worker makes while some queue has settings (the limited one), without the
    upkeep (which also sweeps the parked rows)."""
    return claim_rows(db(), limit, queues, reclaim=False)[0]


def test_a_paused_queues_jobs_are_parked_wherever_they_come_from_and_go_back_on_resume():
    waiting = jobs.noop.using(queue="reports").enqueue_many([()] * 5)
    soon = timezone.now() + timedelta(seconds=2)
    scheduled_id = jobs.noop.using(queue="reports", run_after=soon).enqueue().pk
    [running] = Job.objects.claim("w", queues=["reports"])  # running when the queue is paused
    jobs.noop.enqueue_many([()] * 3)
    pause_queue("reports")
    assert rows_by_queue() == {
        ("reports", "parked"): 4,
        ("reports", "later"): 1,
        ("default", "ring"): 3,
    }

    # Enqueued while paused; handed back while paused; a scheduled one falling due: their
    # rows are placed in the ring, and the upkeep parks them.
    added = jobs.noop.using(queue="reports").enqueue().pk
    assert operations.release(db(), "w", [running]) == {running.pk}
    wait_until(lambda: operations.promote(db()) == 1)
    assert rows_by_queue() == {
        ("reports", "parked"): 4,
        ("reports", "ring"): 3,
        ("default", "ring"): 3,
    }
    assert {j.queue for j in claim()} == {"default"}, "claims leave a paused queue's rows alone"
    assert operations.sweep_parked(db()) == 0, "parked: none back in the ring"
    assert rows_by_queue() == {("reports", "parked"): 7}
    assert claim(["reports"]) == []

    resume_queue("reports")
    assert rows_by_queue() == {("reports", "ring"): 7}
    taken = sorted(j.pk for j in claim(["reports"]))
    assert taken == sorted([*waiting, scheduled_id, added])


def test_the_upkeep_parks_a_backlog_enqueued_while_paused_a_batch_at_a_time():
    """Like the promotion, so one worker's loop never waits for a whole backlog."""
    pause_queue("reports")
    jobs.noop.using(queue="reports").enqueue_many([()] * 5)
    assert operations.sweep_parked(db(), batch=2) == 0, "nothing goes back to the ring"
    assert rows_by_queue() == {("reports", "ring"): 3, ("reports", "parked"): 2}
    operations.sweep_parked(db(), batch=2)
    operations.sweep_parked(db(), batch=2)
    assert rows_by_queue() == {("reports", "parked"): 5}


def test_a_slot_holding_a_paused_backlog_is_truncated_all_the_same():
    """A paused queue's backlog (more rows than recycling moves on) no longer pins its ring
    slot: the slot is truncated once the inserts move past and its other jobs are claimed,
    whatever the xmin horizon, and the backlog runs once the queue is resumed."""
    backlog = jobs.noop.using(queue="reports").enqueue_many([()] * (ready.STRAGGLERS + 100))
    first_slot = (backlog[0] // ready.SLOT_SPAN) % ready.RING_SLOTS
    pause_queue("reports")
    truncated_once_inserts_move_past(first_slot)
    assert rows_by_queue() == {("reports", "parked"): len(backlog)}
    resume_queue("reports")
    assert len(claim(["reports"], limit=1000)) == len(backlog)


def park_across_a_resume(other_connection) -> None:
    """A worker's upkeep parks the queue's rows while a resume commits: the resume cannot see
    the rows it has not committed, so they are left parked in a running queue."""
    other_connection.set_autocommit(False)
    with other_connection.cursor() as cursor:
        cursor.execute(parked_sql.PARK_QUEUE, ["reports"])
    resume_queue("reports")
    other_connection.commit()


def test_rows_a_park_racing_a_resume_left_parked_are_put_back_by_the_upkeep(other_connection):
    """Placement and parking read the queue's row in their own transactions, so a pause or
    resume committing while one is open leaves rows on the wrong side; the workers' upkeep (the
    claim that reclaims) moves them over: none is run while paused, none is left parked for
    good."""
    # Enqueued before the pause commits: in the ring of a paused queue.
    other_connection.set_autocommit(False)
    with other_connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (queue, name, args, kwargs) "
            "VALUES ('reports', 'tests.testapp.jobs.noop', '[]', '{}') RETURNING id"
        )
        [early] = cursor.fetchone()
    pause_queue("reports")
    other_connection.commit()
    other_connection.set_autocommit(True)
    assert rows_by_queue() == {("reports", "ring"): 1}
    assert claim() == [], "the claim leaves a paused queue's job alone"
    taken = claim_rows(db(), 10)
    assert taken[0] == []
    assert rows_by_queue() == {("reports", "parked"): 1}, "the upkeep parked it"

    # Parked while the resume commits: parked in a running queue.
    late = jobs.noop.using(queue="reports").enqueue().pk
    park_across_a_resume(other_connection)
    # The resume put back the row parked before (early); the park moved the other one (late).
    assert rows_by_queue() == {("reports", "parked"): 1, ("reports", "ring"): 1}
    assert [j.pk for j in claim()] == [early]
    assert claim() == [], "claims do not read the parked row..."
    taken = claim_rows(db(), 10)[0]
    assert [j.pk for j in taken] == [late], "...the upkeep puts it back"
    assert rows_by_queue() == {}


def test_a_worker_parks_a_paused_queues_new_jobs_and_runs_those_a_race_left_parked(
    tmp_path: Path, other_connection
):
    out = tmp_path / "out"
    pause_queue("reports")
    proc = start_worker("--threads", "2", env=worker_env())
    try:
        parked = jobs.record.using(queue="reports").enqueue_many([(str(out), "parked")] * 5)
        wait_until(lambda: rows_by_queue() == {("reports", "parked"): len(parked)})
        jobs.record.enqueue(str(out), "default")
        wait_until(lambda: Job.objects.filter(queue="default", status="completed").exists())
        assert Job.objects.filter(queue="reports", status="pending").count() == len(parked)
        # Parked again by an upkeep racing the resume: the worker puts them back and runs them.
        pause_queue("reports")
        park_across_a_resume(other_connection)
        wait_until(lambda: Job.objects.filter(queue="reports", status="completed").count() == 5)
    finally:
        text = stop(proc)
    words = sorted(line.split()[0] for line in out.read_text().splitlines())
    assert words == ["default"] + ["parked"] * len(parked), text


def test_ready_rows_of_paused_queues_are_parked_through_the_migration_and_back():
    with migrated_back_to("0007") as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_queue (name, paused, updated_at) VALUES ('reports', true, now())"
        )
        cursor.execute(
            "INSERT INTO pgqueue_job (queue, name, args, kwargs) SELECT q, "
            "'tests.testapp.jobs.noop', '[]', '{}' FROM unnest(ARRAY['reports', 'reports', "
            "'default']) q"
        )
    assert rows_by_queue() == {("reports", "parked"): 2, ("default", "ring"): 1}
    with migrated_back_to("0007") as cursor:
        assert rows_by_queue() == {("reports", "ring"): 2, ("default", "ring"): 1}
        cursor.execute("SELECT to_regclass(%s)", [ready.PARKED_TABLE])
        assert cursor.fetchone()[0] is None
    assert rows_by_queue() == {("reports", "parked"): 2, ("default", "ring"): 1}


def test_pausing_and_resuming_under_load_runs_every_job_once(tmp_path: Path):
    """Two worker processes, two producers enqueueing into both queues, and one queue paused
    and resumed over and over while they run: rows cross the parked partition in every
    direction (pause, resume, the upkeeps' parks and put-backs racing both); every job runs
    exactly once in the end, and no ready row is left behind."""
    out = tmp_path / "out"
    proc = start_worker("--processes", "2", "--threads", "2", env=worker_env())
    try:
        produced: list[str] = []  # the producers that are done

        def produce(index: int) -> None:
            queue = ["steady", "toggled"][index]
            for batch in range(20):
                jobs.record.using(queue=queue).enqueue_many(
                    [(str(out), f"{queue}-{batch}-{i}") for i in range(10)]
                )
                time.sleep(0.02)
            produced.append(queue)

        def toggle(_: int) -> None:
            # Paused and resumed until both producers are done (and for a while after each
            # upkeep has had a turn), then left paused.
            toggles = 0
            while len(produced) < 2 or toggles < 20:
                pause_queue("toggled")
                time.sleep(0.05)
                resume_queue("toggled")
                time.sleep(0.05)
                toggles += 1
            pause_queue("toggled")

        run_threads(3, lambda i: produce(i) if i < 2 else toggle(i))
        wait_until(lambda: Job.objects.filter(queue="steady", status="completed").count() == 200)
        resume_queue("toggled")
        wait_until(lambda: Job.objects.filter(queue="toggled", status="completed").count() == 200)
    finally:
        text = stop(proc)
    runs = [line.split()[0] for line in out.read_text().splitlines()]
    assert len(runs) == 400 and len(set(runs)) == 400, text
    assert not Job.objects.exclude(status="completed").exists()
    assert rows_by_queue() == {}
