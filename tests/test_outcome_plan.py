"""The outcome write's plan (``sql.outcomes.FINISH``) stays linear in the number of outcomes,
whatever the job table's statistics say. Plans only, never timings."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.operations.outcomes import Outcome
from django_pgqueue.sql import TABLE
from django_pgqueue.sql import outcomes as sql
from django_pgqueue.worker.connection import QueueConnection
from tests.utils import plan_nodes

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "plan-worker"
RUNNING = 300


def burst() -> list[tuple[int, int]]:
    """20,000 pending jobs and ``RUNNING`` claimed by ``WORKER``: their ids and claim tokens."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (queue, name) SELECT 'burst', 'x' FROM generate_series(1, 20000)"
        )
    return running("burst", RUNNING)


def running(queue: str, count: int) -> list[tuple[int, int]]:
    """``count`` jobs of ``queue`` claimed by ``WORKER``: their ids and claim tokens."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {TABLE} (queue, name, status, locked_by, locked_at, claim_token,
                                     attempts)
                SELECT %s, 'x', 'running', %s, now(), 1000 + g, 1
                FROM generate_series(1, %s) g RETURNING id, claim_token""",
            [queue, WORKER, count],
        )
        return [(int(i), int(t)) for i, t in cursor.fetchall()]


def write_counting_reads(
    db: QueueConnection, claimed: list[tuple[int, int]], *, delete_completed: bool
) -> tuple[set[int], int]:
    """The outcomes of ``claimed`` written (and rolled back), and the job rows PostgreSQL
    counted the writing transaction reading."""
    with db.raw.transaction(force_rollback=True):
        written = operations.finish(
            db,
            WORKER,
            [_outcome(job_id, token) for job_id, token in claimed],
            delete_completed=delete_completed,
        )
        read = db.raw.execute(
            "SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)"
            " FROM pg_stat_xact_user_tables WHERE relid = %s::regclass",
            [TABLE],
        ).fetchone()
    assert read is not None
    return written, read[0]


@pytest.fixture
def stale_statistics() -> Iterator[list[tuple[int, int]]]:
    """The trap: the job table ANALYZEd holding one pending job (a queue idle between bursts),
    then a burst: 20,000 pending jobs and ``RUNNING`` claimed by ``WORKER``, their ids and claim
    tokens returned. The statistics say one row, no ``locked_by``, no ``claim_token``."""
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {TABLE} (queue, name) VALUES ('stray', 'x')")
        cursor.execute(f"ANALYZE {TABLE}")
    yield burst()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE} WHERE queue IN ('stray', 'burst')")
        cursor.execute(f"ANALYZE {TABLE}")


@pytest.mark.parametrize("joins", ["any", "nested loop only"])
def test_the_outcome_write_looks_each_job_up_once(stale_statistics, joins):
    """``RUNNING`` outcomes, one of them under an old claim token (fenced out), on a table whose
    statistics say it is nearly empty: in the planner's own choice of plan, and in a nested loop
    where that is the only join allowed, each job row is found by its outcome (its primary key),
    never compared with every outcome. Before, the job side was estimated at one row and taken
    as the outer side of the nested loop: 300 x 299 rows removed by its join filter, which a
    hash join hid only while its cost came out lower (a knife edge: a drain four times slower
    when it did not, docs/benchmarks/drain.md)."""
    claimed = stale_statistics
    document = [
        [job_id, "completed", None, 0, 0, None, None, None, token] for job_id, token in claimed
    ]
    document[0][8] = claimed[0][1] - 1  # an old claim's outcome: fenced out
    with transaction.atomic(), connection.cursor() as cursor:
        if joins == "nested loop only":
            cursor.execute("SET LOCAL enable_hashjoin = off")
            cursor.execute("SET LOCAL enable_mergejoin = off")
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql.FINISH,
            {
                "outcomes": json.dumps(document),
                "count": len(document),
                "worker": WORKER,
                "max_interruptions": 3,
            },
        )
        [[explained]] = cursor.fetchall()
        transaction.set_rollback(True)
    if isinstance(explained, str):
        explained = json.loads(explained)
    plan = explained[0]["Plan"]
    assert plan["Node Type"] == "ModifyTable"
    assert plan["Actual Rows"] == RUNNING - 1
    removed = sum(node.get("Rows Removed by Join Filter", 0) for node in plan_nodes(plan))
    assert removed <= RUNNING, json.dumps(plan, indent=1)


@pytest.fixture
def analyzed_empty() -> Iterator[None]:
    """The job table empty and ANALYZEd (a queue idle between bursts, once autovacuum has been
    by): its statistics say no row."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE}")
        cursor.execute(f"ANALYZE {TABLE}")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE}")
        cursor.execute(f"ANALYZE {TABLE}")


@pytest.mark.parametrize("delete_completed", [False, True], ids=["kept", "deleted"])
def test_outcome_writes_begun_on_an_empty_table_still_find_each_job_by_key(
    analyzed_empty, delete_completed: bool
) -> None:
    """The worker's own connection (statements prepared, one generic plan each) writes its
    first outcomes while the job table is empty, then a burst arrives. A plan made for the
    empty table and kept, a nested loop over the whole table materialized, read all 20,300 job
    rows for each write (with 300 outcomes: 6 million rows compared, 0.4 s; a drain 10 to 30
    times slower until autovacuum analyzed the table again). Each write reads its own jobs'
    rows only, counted by PostgreSQL in the writing transaction."""
    db = QueueConnection("default", "plan test")
    try:
        for _ in range(3):  # prepared, and planned, on the empty table
            operations.finish(db, WORKER, [_outcome(0, 0)], delete_completed=delete_completed)
        written, read = write_counting_reads(db, burst(), delete_completed=delete_completed)
    finally:
        db.close()
    assert len(written) == RUNNING
    assert read <= 2 * RUNNING, read


def _outcome(job_id: int, token: int) -> Outcome:
    now = timezone.now()
    return Outcome(
        job_id=job_id, status="completed", started_at=now, finished_at=now, claim_token=token
    )


@pytest.fixture
def analyzed_thousands() -> Iterator[None]:
    """The job table holding 5,000 pending jobs, ANALYZEd: statistics that are right."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (queue, name) SELECT 'many', 'x' FROM generate_series(1, 5000)"
        )
        cursor.execute(f"ANALYZE {TABLE}")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE}")
        cursor.execute(f"ANALYZE {TABLE}")


@pytest.mark.parametrize("outcomes", [1, 10])
@pytest.mark.parametrize("delete_completed", [False, True], ids=["kept", "deleted"])
def test_a_few_outcomes_read_their_own_jobs_not_the_table(
    analyzed_thousands, outcomes: int, delete_completed: bool
) -> None:
    """A worker that writes a few outcomes at a time (a trickle of jobs, a chain's steps)
    reads their job rows only, whatever the table holds. The outcomes' document was estimated
    at 100 rows (``jsonb_array_elements``), so on a table of a few thousand rows the planner
    scanned all of it into a hash for every write: 1.1 of the 1.8 ms a one-outcome write took
    the server on 3,000 rows."""
    db = QueueConnection("default", "plan test")
    try:
        claimed = running("few", outcomes)
        written, read = write_counting_reads(db, claimed, delete_completed=delete_completed)
    finally:
        db.close()
    assert len(written) == outcomes
    assert read <= 2 * outcomes, read
