"""The ready ring: where the claim finds runnable jobs, apart from the job rows.

Under MVCC pressure (a transaction pinning the xmin horizon) nothing a claim deletes or updates
can be vacuumed away, and a claim that starts at the head of an index walks every dead entry
left there since. So the claim does not read ``pgqueue_job``'s indexes: each pending job has a
small row in ``pgqueue_ready``, a table partitioned by ``slot``:

* ``pgqueue_ready_0`` .. ``_7`` (the ring): runnable jobs, slot ``(id / 4096) % 8``. Ids
  grow, so inserts move from slot to slot every 4,096 jobs; a slot left behind drains as its
  jobs are claimed, and once empty it is TRUNCATEd, which frees its dead entries whatever the
  horizon. A claim walks at most the dead entries of the slots not yet recycled: bounded by
  the ring's size, not by how long the horizon has been pinned.
* ``pgqueue_ready_later`` (slot -1): jobs whose ``run_after`` is in the future. Claims never
  read it; due rows are promoted into the ring in batches, about once a second per worker.
* ``pgqueue_ready_parked`` (slot -2): jobs of paused queues, which no claim reads either
  (``sql.parked``).
* ``pgqueue_ready_held`` (slot -3): the backlog of a busy concurrency or rate key, or of a
  queue with limits of its own, beyond the few rows the ring keeps of it, put back as the
  key's jobs finish or as the limited claim takes the queue's (``sql.held``).

A ready row copies what the claims choose by: queue, priority, run_after, concurrency key,
and (since ``0007_ready_limits``) rate key and concurrency limit, so the limited claim
(``sql.limits``) reads the ring too.

Triggers on ``pgqueue_job`` keep the rows (their functions: ``sql/schema.sql``): a job
inserted pending, or updated into ``pending`` (a retry, a release, a hand-back) or to a new
``run_after`` (run now), gets its ready row; a pending job deleted (or the table truncated)
takes its rows along. The claim deletes the rows it takes; a row whose
job is no longer pending and due (cancelled, deleted, already claimed through a duplicate) is
deleted without running anything.
"""

from __future__ import annotations

from collections.abc import Callable

from django_pgqueue.sql import PENDING, TABLE, claim_order

READY_TABLE = "pgqueue_ready"
LATER_TABLE = "pgqueue_ready_later"
#: The ring's slots, and how many consecutive job ids share one.
RING_SLOTS = 8
SLOT_SPAN = 4096
LATER_SLOT = -1
PARKED_TABLE = f"{READY_TABLE}_parked"
PARKED_SLOT = -2
HELD_TABLE = f"{READY_TABLE}_held"
HELD_SLOT = -3
#: Rows left in a drained slot that recycling moves on (more: the slot is still draining); the
#: number ``pgqueue_ready_recycle`` spells.
STRAGGLERS = 256


#: The job columns a ready row copies: those of ``0006_ready_ring``, and the limits' (``0007``).
COLUMNS = (
    "queue",
    "priority",
    "run_after",
    "concurrency_key",
    "rate_key",
    "concurrency_limit",
    # The job's kind (``0021_job_kind``): a claim takes each kind apart (``sql.claim``).
    "is_async",
)
_COPIED = ", ".join(COLUMNS)


def slot_table(slot: int) -> str:
    named = {LATER_SLOT: LATER_TABLE, PARKED_SLOT: PARKED_TABLE, HELD_SLOT: HELD_TABLE}
    return named.get(slot, f"{READY_TABLE}_{slot}")


#: The ring slot inserts go to now (that of the newest job id); ``mod()``, not ``%``, so a
#: statement with parameters can use it as it is.
INSERT_SLOT = f"""mod(coalesce(pg_sequence_last_value(pg_get_serial_sequence('{TABLE}', 'id')), 0)
    / {SLOT_SPAN}, {RING_SLOTS})"""


def agrees(job: str, row: str) -> str:
    """Whether the ready row ``row`` copies the job ``job`` as it is now (both: aliases)."""
    return (
        f"({job}.queue, {job}.priority, {job}.run_after, {job}.concurrency_key, "
        f"{job}.rate_key, {job}.concurrency_limit, {job}.is_async) IS NOT DISTINCT FROM "
        f"({row}.queue, {row}.priority, {row}.run_after, {row}.concurrency_key, {row}.rate_key, "
        f"{row}.concurrency_limit, {row}.is_async)"
    )


def job_of_row(row: str) -> str:
    """A ``JOIN LATERAL`` of the job of the ready row ``row`` (an alias), locked ``SKIP
    LOCKED``, kept if it is pending, due and agrees with the row. The claims lock the ready row
    first (:func:`candidates`): rows another claim holds are skipped before their jobs are read.

    The subquery looks the job up by ``j.id = {row}.job_id`` alone, behind ``OFFSET 0`` (no
    condition is pushed into it), so the primary key is the only index it can use: with the
    status condition in it, the planner could read the partial index of pending jobs
    whole for each candidate, every dead entry a pinned xmin horizon left there (claims of
    300 ms, the idle-in-transaction scenario collapsing). The conditions apply to the version
    the lock returns (the newest). Never a join on the primary key either, whose planning
    reads the index's actual end (``get_actual_variable_range``). ``clock_timestamp()``, not
    ``now()``: a job committed after this transaction began (its ``run_after`` is its own
    transaction's start) is due. ``job_row``: the locked version's ``ctid``, which no one else
    can change while the claim holds the lock (the claim's update finds the row by it).
    """
    copied = ", ".join(f"j.{c}" for c in COLUMNS)
    return f"""JOIN LATERAL (
        SELECT j.id, j.ctid AS job_row, j.status, {copied} FROM {TABLE} j
        WHERE j.id = {row}.job_id
        OFFSET 0
        FOR UPDATE SKIP LOCKED) j
    ON j.status = {PENDING} AND j.run_after <= clock_timestamp() AND {agrees("j", row)}"""


#: How many ring rows a claim may step over besides the jobs it asks for (S4): rows whose job
#: another transaction has locked, whose concurrency key another claim holds, that break S1-S3.
STEP_OVER = 1000


def candidates(where: str, then: str, columns: str, limit: str = "%(limit)s") -> str:
    """A claim's pick: ``columns`` of up to ``limit`` ring rows ``r`` that ``where`` keeps
    (no side effects: it may be evaluated for every row of the ring), taken in the claims'
    order, each locked ``SKIP LOCKED``, then kept if its job can be locked and taken
    (:func:`job_of_row`, alias ``j``) and ``then`` holds (``then`` may take advisory locks).

    The side effects happen row by row, only for the rows the ``LIMIT`` pulls: the ordered
    rows come from a subquery the planner cannot flatten (its ``LIMIT``), and nothing above
    it sorts. Were the job lock or ``then`` below a sort (a plan the planner picks when the
    ring's statistics say it is small), they would run for every row of the ring: a claim of
    seven jobs locking every pending job, every concurrent claim finding none. The nested
    loop keeps the subquery's order; the subquery's own ``LIMIT`` lets the planner read the
    ring's index in that order, and bounds the rows stepped over (:data:`STEP_OVER`).
    """
    copied = ", ".join(f"r.{c}" for c in COLUMNS)
    return f"""
    SELECT {columns} FROM (
        SELECT r.slot, r.ctid AS row_id, r.job_id, {copied} FROM {READY_TABLE} r
        WHERE {where}
        ORDER BY {claim_order("r.")}
        LIMIT {limit} + {STEP_OVER}
        FOR UPDATE SKIP LOCKED) r
    {job_of_row("r")}
    WHERE {then}
    LIMIT {limit}"""


#: The claims' limits by kind (``0021_job_kind``): ``%(limit)s`` sync jobs (the worker's free
#: threads), ``%(async_limit)s`` async ones (its event loop's room), ``%(total)s::integer`` at most
#: in all. Each kind is picked apart (:func:`by_kind`): room for one kind never fills with the
#: other, and a kind without room reads nothing (``LIMIT 0``). A claim with no room for async
#: jobs (``%(async_limit)s`` 0) runs its statement's sync-only variant (``sync_only``): a branch
#: that reads nothing still costs its plan's start, the locks of eight partitions and their
#: indexes, and reads their index pages (a third of a one-job claim, issue 31's pickup).
SYNC, ASYNC = "NOT r.is_async", "r.is_async"
KIND_LIMITS = {SYNC: "%(limit)s", ASYNC: "%(async_limit)s::integer"}


def by_kind(pick: Callable[[str, str], str], *, sync_only: bool = False) -> str:
    """``pick(kind, limit)`` for each kind (a condition on the ring row ``r``, and its limit
    parameter), one after the other (``UNION ALL``): what a claim takes of each; with
    ``sync_only``, of sync jobs alone."""
    kinds = {SYNC: KIND_LIMITS[SYNC]} if sync_only else KIND_LIMITS
    return "\n    UNION ALL\n".join(f"({pick(kind, limit)})" for kind, limit in kinds.items())


#: Where a moved row ``m`` goes by its job id and ``run_after``: a ring slot, or the later
#: partition.
BY_ID = "pgqueue_ready_slot(m.job_id, m.run_after)"
#: The rows the CTEs of :func:`delete_taken` deleted (with ``returning``), as one: ``m``.
TAKEN = "(" + " UNION ALL ".join(f"SELECT * FROM taken_{s}" for s in range(RING_SLOTS)) + ") m"


def insert_moved(slot: str, rows: str = "m") -> str:
    """Insert ready rows again (``rows``: a from-item whose rows are ``m``), in ``slot`` (an
    SQL expression, of ``m``)."""
    moved = ", ".join(f"m.{c}" for c in COLUMNS)
    return f"""INSERT INTO {READY_TABLE} (slot, job_id, {_COPIED})
SELECT {slot}, m.job_id, {moved} FROM {rows}"""


def move_rows(where: str, slot: str) -> str:
    """Move the ready rows ``r`` that ``where`` picks to ``slot`` (of the moved row ``m``)."""
    return f"""
WITH m AS (DELETE FROM {READY_TABLE} r WHERE {where} RETURNING r.*)
{insert_moved(slot)}
"""


#: Due rows of the later partition move into the ring (any queue: whoever promotes, serves all).
PROMOTE = f"""
WITH due AS (
    DELETE FROM {READY_TABLE} r
    WHERE r.slot = {LATER_SLOT} AND r.job_id = ANY(ARRAY(
        SELECT job_id FROM {READY_TABLE}
        WHERE slot = {LATER_SLOT} AND run_after <= now()
        ORDER BY run_after
        LIMIT %s
        FOR UPDATE SKIP LOCKED))
    RETURNING r.job_id, {", ".join("r." + c for c in COLUMNS)}
)
INSERT INTO {READY_TABLE} (slot, job_id, {_COPIED})
SELECT pgqueue_ready_slot(job_id, run_after), job_id, {_COPIED}
FROM due
"""


def rows_of_picked(candidates: str, picked: str) -> str:
    """The ring rows a claim deletes (``slot``, ``row_id``): those of ``picked`` (a CTE of some
    rows of the CTE ``candidates``, with their ``slot``, ``row_id`` and job ``id``), and any
    other candidate row of a picked job (two rows of one job, S1 violated: both go).

    Only an id that ``candidates`` holds twice is looked up among the picked ids: a test of
    every candidate against every picked id (``id = ANY(...)`` over an array, a linear search)
    was a million comparisons in a claim of 1,000, 2.5 ms of its 19.
    """
    return f"""
    SELECT slot, row_id FROM {picked}
    UNION ALL
    SELECT slot, row_id FROM {candidates}
    WHERE CASE WHEN id = ANY(ARRAY(SELECT id FROM {candidates} GROUP BY id HAVING count(*) > 1))
               THEN id = ANY(ARRAY(SELECT id FROM {picked})) END"""


def delete_taken(gone: str, *, returning: bool = False) -> str:
    """CTEs, to follow another, deleting the ring rows listed by the CTE ``gone`` (``slot``,
    ``row_id``: the row's ``ctid``, stable while the claim has it locked): ``taken_0`` ..
    ``taken_7``, each returning its deleted rows with ``returning``.

    One ``DELETE`` per slot, each fetching its own rows by ``ctid``: no index to read, and the
    ring keeps no index on ``job_id`` for it to write at every enqueue. (A ``DELETE`` on the
    partitioned table with ``slot = ANY(...)`` would visit every slot: run-time pruning does
    not take an array parameter.)
    """
    returned = " RETURNING *" if returning else ""
    return "".join(
        f""", taken_{slot} AS (
    DELETE FROM {READY_TABLE}_{slot}
    WHERE ctid = ANY(ARRAY(SELECT row_id FROM {gone} WHERE slot = {slot})){returned}
)"""
        for slot in range(RING_SLOTS)
    )


#: Ring slots worth recycling: not the one inserts go to now, and not already empty on disk.
RECYCLABLE = f"""
SELECT s FROM generate_series(0, {RING_SLOTS - 1}) AS s
WHERE s <> {INSERT_SLOT}
  AND pg_relation_size(('{READY_TABLE}_' || s)::regclass) > 0
ORDER BY s
"""

#: Recycle one slot: TRUNCATE it if it holds no row of a pending job (``pgqueue_ready_recycle``
#: in ``sql/schema.sql``).
RECYCLE = "SELECT pgqueue_ready_recycle(%s)"

#: Rows per ring slot, in the later, parked and held partitions (tests and the benchmark look).
SLOT_COUNTS = f"SELECT slot, count(*) FROM {READY_TABLE} GROUP BY slot ORDER BY slot"
