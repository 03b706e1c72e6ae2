"""The ready ring: where the claim finds runnable jobs, apart from the job rows.

Under MVCC pressure (a transaction pinning the xmin horizon) nothing a claim deletes or updates
can be vacuumed away, and a claim that starts at the head of an index walks every dead entry
left there since. So the claim does not read ``pgqueue_job``'s indexes: each pending job has a
small row in ``pgqueue_ready``, a table partitioned by ``slot``:

* ``pgqueue_ready_0`` .. ``_7`` (the ring): runnable jobs, slot ``(id / 4096) % 8``. Ids
  grow, so inserts move from slot to slot every 4,096 jobs; a slot left behind drains as its
  jobs are claimed, and once empty it is TRUNCATEd, which frees its dead entries whatever the
  horizon. A claim walks at most the dead entries of the slots not yet recycled: bounded by
  the ring's size, not by how long the horizon has been held.
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

Triggers on ``pgqueue_job`` keep the rows (see the migration ``0006_ready_ring``): a job
inserted pending, or updated into ``pending`` (a retry, a release, a hand-back) or to a new
``run_after`` (run now), gets its ready row; a pending job deleted (or the table truncated)
takes its rows along. The claim deletes the rows it takes; a row whose
job is no longer pending and due (cancelled, deleted, already claimed through a duplicate) is
deleted without running anything.
"""

from __future__ import annotations

from django_pgqueue.sql import TABLE
from django_pgqueue.states import JobStatus

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
#: Rows left in a drained slot that recycling moves on (more: the slot is still draining).
STRAGGLERS = 256

_PENDING = f"'{JobStatus.PENDING.value}'"

#: The job columns a ready row copies: those of ``0006_ready_ring``, and the limits' (``0007``).
BASE_COLUMNS = ("queue", "priority", "run_after", "concurrency_key")
LIMIT_COLUMNS = ("rate_key", "concurrency_limit")
COLUMNS = BASE_COLUMNS + LIMIT_COLUMNS
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
        f"{job}.rate_key, {job}.concurrency_limit) IS NOT DISTINCT FROM ({row}.queue, "
        f"{row}.priority, {row}.run_after, {row}.concurrency_key, {row}.rate_key, "
        f"{row}.concurrency_limit)"
    )


def job_of_row(row: str) -> str:
    """A ``LATERAL`` subquery: the job of the ready row ``row`` (an alias), locked ``SKIP
    LOCKED``, if it is pending, due and agrees with the row. Locked first: a claim that gets
    the job row goes on to lock the ready row, and one that does not never tries.

    By ``j.id = {row}.job_id`` inside a subquery with a locking clause, which the planner keeps
    apart and probes per row: never a join on the primary key, whose planning reads the
    index's actual end (``get_actual_variable_range``), stepping over every dead entry a
    pinned xmin horizon leaves there. ``clock_timestamp()``, not ``now()``: a job committed
    after this transaction began (its ``run_after`` is its own transaction's start) is due.
    """
    return f"""(
        SELECT j.id FROM {TABLE} j
        WHERE j.id = {row}.job_id AND j.status = {_PENDING}
          AND j.run_after <= clock_timestamp() AND {agrees("j", row)}
        FOR UPDATE SKIP LOCKED) j"""


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


def delete_taken(gone: str, *, returning: bool = False) -> str:
    """CTEs, to follow another, deleting the ring rows listed by the CTE ``gone`` (``slot``,
    ``row_id``: the row's ``ctid``, stable while the claim holds its lock): ``taken_0`` ..
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

#: Recycle one slot: TRUNCATE it if it holds no row of a pending job (see the migration).
RECYCLE = "SELECT pgqueue_ready_recycle(%s)"

#: Rows per ring slot, in the later, parked and held partitions (tests and the benchmark look).
SLOT_COUNTS = f"SELECT slot, count(*) FROM {READY_TABLE} GROUP BY slot ORDER BY slot"

#: The ring's DDL, for the migration: tables, indexes and the functions the triggers call.
_PARTITIONS = "\n".join(
    f"CREATE TABLE {READY_TABLE}_{s} PARTITION OF {READY_TABLE} FOR VALUES IN ({s});"
    for s in range(RING_SLOTS)
)


def keep_rows(columns: tuple[str, ...], *, parked: bool = False, held: bool = False) -> str:
    """The trigger functions, the update trigger and the recycling function, for ready rows
    that copy ``columns``: ``CREATE OR REPLACE``, so a migration can change the copied set.
    With ``parked`` (``0008``) and ``held`` (``0009``), a pending job's parked or held row is
    replaced like its later one."""
    copied = ", ".join(columns)
    # The partitions a pending job's earlier row is found in by job id (ring rows are left to
    # the claim).
    slots = [LATER_SLOT] + [PARKED_SLOT] * parked + [HELD_SLOT] * held
    by_job = f"slot IN ({', '.join(map(str, slots))})" if len(slots) > 1 else f"slot = {LATER_SLOT}"
    new_values = ", ".join(f"NEW.{c}" for c in columns)
    changed = "\n        OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns)
    pending = _PENDING.replace("'", "''")
    return f"""
CREATE OR REPLACE FUNCTION pgqueue_ready_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {READY_TABLE} (slot, job_id, {copied})
    SELECT pgqueue_ready_slot(id, run_after), id, {copied}
    FROM inserted WHERE status = {_PENDING};
    RETURN NULL;
END;
$$;

-- A job became pending (retry, release, hand-back) or pending with a new run_after (run now):
-- its row goes where its run_after says. A later (or parked) row it had is replaced; a ring row
-- it may still have is left to the claim, which deletes rows whose job is not pending and due.
CREATE OR REPLACE FUNCTION pgqueue_ready_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = {_PENDING} THEN
        DELETE FROM {READY_TABLE} WHERE {by_job} AND job_id = OLD.id;
    END IF;
    INSERT INTO {READY_TABLE} (slot, job_id, {copied})
    VALUES (pgqueue_ready_slot(NEW.id, NEW.run_after), NEW.id, {new_values});
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS pgqueue_job_ready_update ON {TABLE};
CREATE TRIGGER pgqueue_job_ready_update
    AFTER UPDATE OF status, {copied} ON {TABLE}
    FOR EACH ROW WHEN (NEW.status = {_PENDING} AND (
        OLD.status <> {_PENDING}
        OR {changed}))
    EXECUTE FUNCTION pgqueue_ready_update();

-- TRUNCATE a ring slot that inserts have moved past: its dead tuples go with it, whatever the
-- xmin horizon. Under ACCESS EXCLUSIVE (NOWAIT: a slot in use is left for the next round), so
-- no insert or claim can be in flight on it. A slot with a few rows left (at most
-- {STRAGGLERS}) is cleared of those whose jobs are gone or no longer pending, and the rest move to
-- the slot inserts go to now; one with more is still draining and is left alone.
CREATE OR REPLACE FUNCTION pgqueue_ready_recycle(ring_slot integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    part text := format('{READY_TABLE}_%s', ring_slot);
    rows_left bigint;
    target integer;
BEGIN
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE NOWAIT', part);
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I LIMIT {STRAGGLERS + 1}) s', part)
        INTO rows_left;
    IF rows_left > {STRAGGLERS} THEN
        RETURN false;
    END IF;
    IF rows_left > 0 THEN
        EXECUTE format(
            'DELETE FROM %I r WHERE NOT EXISTS (SELECT 1 FROM {TABLE} j '
            'WHERE j.id = r.job_id AND j.status = {pending})', part);
        -- Stragglers (pending jobs of a queue no worker serves, say) move to the slot inserts
        -- go to now, so they never keep this one from being truncated.
        target := (coalesce(pg_sequence_last_value(pg_get_serial_sequence('{TABLE}', 'id')), 0)
                   / {SLOT_SPAN}) % {RING_SLOTS};
        IF target = ring_slot THEN
            RETURN false;
        END IF;
        EXECUTE format(
            'WITH moved AS (DELETE FROM %I RETURNING *) '
            'INSERT INTO {READY_TABLE} (slot, job_id, {copied}) '
            'SELECT %s, job_id, {copied} FROM moved', part, target);
    END IF;
    EXECUTE format('TRUNCATE %I', part);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END;
$$;
"""


def _delete_function(statement: str) -> str:
    """The function of the trigger that deletes the ready rows of jobs deleted while pending."""
    return f"""
CREATE OR REPLACE FUNCTION pgqueue_ready_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {statement};
    RETURN NULL;
END;
$$;
"""


# Found by a join (the ring's slots have no index on job_id since 0007; the later partition has
# its own), or, before 0007, by the ring's job_id index.
_DELETE_BY_JOIN = _delete_function(
    f"""DELETE FROM {READY_TABLE} r USING deleted d
    WHERE r.job_id = d.id AND d.status = {_PENDING}"""
)
_DELETE_BY_INDEX = _delete_function(
    f"""DELETE FROM {READY_TABLE}
    WHERE job_id = ANY(ARRAY(SELECT id FROM deleted WHERE status = {_PENDING}))"""
)


CREATE = f"""
CREATE TABLE {READY_TABLE} (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue varchar(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamptz NOT NULL,
    concurrency_key varchar(255)
) PARTITION BY LIST (slot);
CREATE TABLE {LATER_TABLE} PARTITION OF {READY_TABLE} FOR VALUES IN ({LATER_SLOT});
{_PARTITIONS}
CREATE INDEX {READY_TABLE}_claim ON {READY_TABLE} (priority DESC, run_after, job_id);
CREATE INDEX {READY_TABLE}_claim_queue ON {READY_TABLE} (queue, priority DESC, run_after, job_id);
CREATE INDEX {READY_TABLE}_job ON {READY_TABLE} (job_id);
CREATE INDEX {LATER_TABLE}_due ON {LATER_TABLE} (run_after);

-- clock_timestamp(), not now(): a run_after set a moment ago (run now) is due, whenever the
-- transaction began.
CREATE FUNCTION pgqueue_ready_slot(job_id bigint, run_after timestamptz) RETURNS smallint
LANGUAGE sql VOLATILE AS $$
    SELECT (CASE WHEN run_after > clock_timestamp() THEN {LATER_SLOT}
            ELSE (job_id / {SLOT_SPAN}) % {RING_SLOTS} END)::smallint
$$;
{keep_rows(BASE_COLUMNS)}
CREATE TRIGGER pgqueue_job_ready_insert
    AFTER INSERT ON {TABLE} REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_ready_insert();

-- Deleted pending jobs take their ready rows with them (prune deletes finished jobs only: its
-- transition table holds no pending row), and TRUNCATE of the job table empties the ring.
{_DELETE_BY_INDEX}
CREATE TRIGGER pgqueue_job_ready_delete
    AFTER DELETE ON {TABLE} REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_ready_delete();
CREATE FUNCTION pgqueue_ready_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE {READY_TABLE};
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_ready_truncate
    AFTER TRUNCATE ON {TABLE} FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_ready_truncate();

-- Pending jobs of a table made before the ring.
INSERT INTO {READY_TABLE} (slot, job_id, {", ".join(BASE_COLUMNS)})
SELECT pgqueue_ready_slot(id, run_after), id, {", ".join(BASE_COLUMNS)}
FROM {TABLE} WHERE status = {_PENDING};
"""

#: ``0007_ready_limits``: ready rows copy the job's rate key and concurrency limit, so the
#: limited claim reads the ring like the plain one; a partial index says whether limited jobs
#: wait (the ring's slots are truncated once drained: its dead entries stay bounded). The
#: claims delete the rows they take by ``ctid``, so only the later partition (whose rows the
#: update trigger and the promotion find by job) keeps an index on ``job_id``: one index write
#: less per enqueued job.
ADD_LIMITS = f"""
ALTER TABLE {READY_TABLE} ADD COLUMN rate_key varchar(255), ADD COLUMN concurrency_limit integer;
CREATE INDEX {READY_TABLE}_limited ON {READY_TABLE} (job_id)
    WHERE rate_key IS NOT NULL OR concurrency_limit IS NOT NULL;
CREATE INDEX {LATER_TABLE}_job ON {LATER_TABLE} (job_id);
DROP INDEX {READY_TABLE}_job;
{_DELETE_BY_JOIN}
{keep_rows(COLUMNS)}
UPDATE {READY_TABLE} r SET rate_key = j.rate_key, concurrency_limit = j.concurrency_limit
FROM {TABLE} j
WHERE j.id = r.job_id AND (j.rate_key IS NOT NULL OR j.concurrency_limit IS NOT NULL);
"""

REMOVE_LIMITS = f"""
{keep_rows(BASE_COLUMNS)}
{_DELETE_BY_INDEX}
DROP INDEX {LATER_TABLE}_job;
CREATE INDEX {READY_TABLE}_job ON {READY_TABLE} (job_id);
DROP INDEX IF EXISTS {READY_TABLE}_limited;
ALTER TABLE {READY_TABLE} DROP COLUMN rate_key, DROP COLUMN concurrency_limit;
"""

DROP = f"""
DROP TRIGGER IF EXISTS pgqueue_job_ready_truncate ON {TABLE};
DROP TRIGGER IF EXISTS pgqueue_job_ready_delete ON {TABLE};
DROP TRIGGER IF EXISTS pgqueue_job_ready_update ON {TABLE};
DROP TRIGGER IF EXISTS pgqueue_job_ready_insert ON {TABLE};
DROP FUNCTION IF EXISTS pgqueue_ready_recycle(integer);
DROP FUNCTION IF EXISTS pgqueue_ready_truncate();
DROP FUNCTION IF EXISTS pgqueue_ready_delete();
DROP FUNCTION IF EXISTS pgqueue_ready_update();
DROP FUNCTION IF EXISTS pgqueue_ready_insert();
DROP TABLE IF EXISTS {READY_TABLE};
DROP FUNCTION IF EXISTS pgqueue_ready_slot(bigint, timestamptz);
"""
