"""The storage's invariants as queries, and the statements that restore them.

``docs/storage.md`` numbers the invariants; each query here finds the jobs that break one:

* S1 ``stranded``: a pending job without a ready row. No claim can reach it.
* S1 ``duplicated``: a job with more than one ready row.
* S2 ``disagreeing``: a ready row whose copy of its pending job (queue, priority,
  ``run_after``, keys, limit) is not what the job says.
* S3 ``orphaned``: a ready row whose job is gone or not pending.
* S7 ``misshapen_windows``: a rate window larger than its bound, or whose counts do not match
  its entries (reported; the repair leaves windows alone).
* S12 ``deaf_listeners``: a worker row that says ``listening`` while no listening connection
  of that worker (its own, or its relay's: ``listener``) is open (reported as a warning: any
  worker's reading of the rota corrects it).
* F1 ``miscounted_parents``: a job whose ``parents_left`` is not the number of its edges not
  ``satisfied``, or whose edge says its parent completed when it did not (or the reverse), or
  an edge whose child is gone.
* F2 ``stuck_waiting``: a waiting job with no parent left to wait for, or waiting for a parent
  that ended dead or cancelled, or is gone: nothing will ever release it.
* F3 ``unmarked_parents``: a parent without ``dependents``: its end would not reach them.
* B1 ``miscounted_batches``: a sealed batch whose tally of active members, or its count of
  buckets left, or its being finished, disagrees with its members (named ``batch #<id>``).
* S9, S11 ``unvalidated``: a CHECK constraint of the queue's tables added ``NOT VALID`` whose
  validation did not run (a migration stopped between its two steps): the database enforces it
  on new writes only, so rows written before may break it (reported; validate it). Also an
  invalid index of the job table: a concurrent build that failed (or is under way).

:data:`VIOLATIONS` reads them in one statement (one snapshot: right while workers drain), each
as a count and the first ids. The triggers keep every one of them in the job's own
transaction; they are broken only by writes that bypass triggers (``session_replication_role
= replica``, a logical-replication apply, ``pg_restore --disable-triggers``, ``ALTER TABLE ...
DISABLE TRIGGER``) or by a bug. :data:`CHECK_RANGE`, :data:`LOCK_PENDING` and :data:`REDERIVE`
restore them, a range of job ids at a time.
"""

from __future__ import annotations

from django_pgqueue.sql import COMPLETED, PENDING, TABLE, WORKER_TABLE
from django_pgqueue.sql.flow import BATCH_TABLE, BUCKET, DEPENDENCY_TABLE, TALLY_TABLE
from django_pgqueue.sql.limits import BUCKETS, WINDOW_TABLE
from django_pgqueue.sql.ready import COLUMNS, READY_TABLE, agrees
from django_pgqueue.sql.rota import LISTENER_OF, LIVE_LISTENERS
from django_pgqueue.states import ACTIVE, FAILED, JobStatus, sql_list

_WAITING = sql_list([JobStatus.WAITING])

#: How many ids each violation names.
FIRST_IDS = 10

#: The ids of one range of the repair (numbered by :data:`NEXT_RANGES`): every invariant but
#: S7 is about one job and its rows, so the id space can be checked and repaired a range at a
#: time, each range's cost bounded whatever the table's size or the horizon (a range reads its
#: ids' rows by primary key, dead versions included, and their ready rows by
#: ``pgqueue_ready_job``).
REPAIR_RANGE = 2_500

# Each query below takes the ids in [%(lo)s, %(hi)s): the whole table is [0, 2^63 - 1). It
# reads the range twice, once a side, and matches them in memory:
#
# * ``pending``: the range's pending jobs, found by primary key alone (behind ``OFFSET 0``: with
#   the status condition inside, the planner could read the partial index of pending jobs
#   whole, every dead entry of a pinned xmin horizon with it);
# * ``ready_rows``: the range's ready rows, by ``pgqueue_ready_job``;
# * ``per_job``: each pending job's rows counted, and whether they all agree with it.
_IN_RANGE = "{id} >= %(lo)s AND {id} < %(hi)s"

_RANGE = f"""pending AS MATERIALIZED (
    SELECT j.* FROM (
        SELECT j.id, j.status, {", ".join("j." + c for c in COLUMNS)} FROM {TABLE} j
        WHERE {_IN_RANGE.format(id="j.id")} OFFSET 0) j
    WHERE j.status = {PENDING}
), ready_rows AS MATERIALIZED (
    SELECT r.job_id, {", ".join("r." + c for c in COLUMNS)} FROM {READY_TABLE} r
    WHERE {_IN_RANGE.format(id="r.job_id")}
), per_job AS MATERIALIZED (
    SELECT p.id, count(r.job_id) AS n,
           coalesce(bool_and({agrees("p", "r")}) FILTER (WHERE r.job_id IS NOT NULL), TRUE)
               AS agree
    FROM pending p LEFT JOIN ready_rows r ON r.job_id = p.id
    GROUP BY p.id
)"""

_STRANDED = "SELECT id FROM per_job WHERE n = 0"

_DUPLICATED = "SELECT job_id AS id FROM ready_rows GROUP BY job_id HAVING count(*) > 1"

_DISAGREEING = "SELECT id FROM per_job WHERE n > 0 AND NOT agree"

_ORPHANED = """SELECT DISTINCT r.job_id AS id FROM ready_rows r
    WHERE NOT EXISTS (SELECT 1 FROM pending p WHERE p.id = r.job_id)"""


def _status_of(row: str) -> str:
    """The status of the job of the ready row ``row`` (NULL: gone), by its id alone behind
    ``OFFSET 0``: the primary key is the only index the lookup can use (with the status
    condition in it, the planner could read the partial index of pending jobs whole for each
    row, every dead entry of a pinned xmin horizon: 4 s a statement under pressure)."""
    return f"(SELECT j.status FROM {TABLE} j WHERE j.id = {row}.job_id OFFSET 0)"


# S7's part the storage can show: a window stays about a hundred entries whatever its rate
# (its starts' times up to ``limits.EXACT_STARTS`` a period, else one entry per bucket), and
# ``counts`` is empty or has one count per entry of ``recent``.
_MISSHAPEN_WINDOWS = f"""SELECT w.id FROM {WINDOW_TABLE} w
    WHERE cardinality(w.recent) > greatest(w.starts, {BUCKETS + 2})
       OR cardinality(w.counts) NOT IN (0, cardinality(w.recent))"""

# F1-F3 and B1 (workflows, ``0022_workflows``): the triggers keep them in the transaction of
# each status change; the whole tables are read (they are not checked by range).
_FAILED = sql_list(FAILED)
_MISCOUNTED_PARENTS = f"""SELECT j.id FROM {TABLE} j
    WHERE j.parents_left IS NOT NULL AND j.parents_left <> (
        SELECT count(*) FROM {DEPENDENCY_TABLE} d WHERE d.child_id = j.id AND NOT d.satisfied)
    UNION SELECT d.child_id FROM {DEPENDENCY_TABLE} d JOIN {TABLE} p ON p.id = d.parent_id
    WHERE d.satisfied <> (p.status = {COMPLETED})
    UNION SELECT d.child_id FROM {DEPENDENCY_TABLE} d
    WHERE NOT EXISTS (SELECT 1 FROM {TABLE} c WHERE c.id = d.child_id)"""

_STUCK_WAITING = f"""SELECT j.id FROM {TABLE} j
    WHERE j.status = {_WAITING} AND (coalesce(j.parents_left, 0) <= 0 OR EXISTS (
        SELECT 1 FROM {DEPENDENCY_TABLE} d LEFT JOIN {TABLE} p ON p.id = d.parent_id
        WHERE d.child_id = j.id AND NOT d.satisfied
          AND (p.id IS NULL OR p.status IN ({_FAILED}))))"""

_UNMARKED_PARENTS = f"""SELECT DISTINCT d.parent_id AS id FROM {DEPENDENCY_TABLE} d
    JOIN {TABLE} p ON p.id = d.parent_id WHERE NOT p.dependents"""

_MISCOUNTED_BATCHES = f"""SELECT 'batch #' || b.id AS id FROM {BATCH_TABLE} b
    WHERE b.sealed_at IS NOT NULL AND (
        b.buckets_left <> (SELECT count(*) FROM {TALLY_TABLE} t
                           WHERE t.batch_id = b.id AND t.unfinished > 0)
        OR (b.finished_at IS NULL) <> (b.buckets_left > 0)
        OR EXISTS (
            SELECT 1 FROM (
                SELECT j.id / {BUCKET} AS bucket, count(*) AS n FROM {TABLE} j
                WHERE j.batch_id = b.id AND j.status IN ({sql_list(ACTIVE)})
                GROUP BY 1) m
            FULL JOIN (SELECT t.bucket, t.unfinished AS n FROM {TALLY_TABLE} t
                       WHERE t.batch_id = b.id AND t.unfinished <> 0) t
            ON t.bucket = m.bucket
            WHERE m.n IS DISTINCT FROM t.n))"""

# S9, S11 and the status CHECK (``0022_workflows``) are CHECK constraints that migrations add
# ``NOT VALID`` and validate in a second transaction (its lock lets reads and writes go on): a
# migration stopped between the two leaves one that holds for new rows only. The job table's
# indexes are built ``CONCURRENTLY`` since ``0023_workflows_online``: a build that failed (or
# one under way) leaves an invalid index, which no query uses and which enforces nothing.
_UNVALIDATED = f"""SELECT c.conrelid::regclass::text || '.' || c.conname AS id FROM pg_constraint c
    WHERE c.conrelid IN ('{TABLE}'::regclass, '{READY_TABLE}'::regclass, '{WINDOW_TABLE}'::regclass)
      AND c.contype = 'c' AND NOT c.convalidated
    UNION ALL
    SELECT i.indrelid::regclass::text || '.' || i.indexrelid::regclass::text || ' (index)'
    FROM pg_index i WHERE i.indrelid = '{TABLE}'::regclass AND NOT i.indisvalid"""

# S12: what ``sql.rota.PEERS`` corrects at each reading of the rota, read the same way.
_DEAF_LISTENERS = f"""SELECT w.worker_id AS id FROM {WORKER_TABLE} w
    CROSS JOIN ({LIVE_LISTENERS}) live
    WHERE w.listening AND NOT ({LISTENER_OF} = ANY(live.names))"""

#: Which kinds of violation there are, in the order :data:`VIOLATIONS` returns them (the first
#: four name jobs; ``misshapen_windows`` names rate windows, ``unvalidated`` constraints as
#: ``table.constraint``, ``miscounted_batches`` batches, ``deaf_listeners`` workers).
KINDS = (
    "stranded",
    "duplicated",
    "disagreeing",
    "orphaned",
    "misshapen_windows",
    "unvalidated",
    "miscounted_parents",
    "stuck_waiting",
    "unmarked_parents",
    "miscounted_batches",
    "deaf_listeners",
)

#: The kinds whose first ids are names, not job ids.
NAMED_KINDS = frozenset(
    {"misshapen_windows", "unvalidated", "miscounted_batches", "deaf_listeners"}
)


def _summary(kind: str, ids: str) -> str:
    return f"""SELECT '{kind}' AS kind, count(*) AS n,
        (array_agg(v.id::text ORDER BY v.id))[1:{FIRST_IDS}] AS first
    FROM ({ids}) v"""


#: ``(kind, count, first ids as text)`` for each kind, every kind once (count 0: none).
VIOLATIONS = f"WITH {_RANGE}\n" + "\nUNION ALL\n".join(
    _summary(kind, ids)
    for kind, ids in zip(
        KINDS,
        (
            _STRANDED,
            _DUPLICATED,
            _DISAGREEING,
            _ORPHANED,
            _MISSHAPEN_WINDOWS,
            _UNVALIDATED,
            _MISCOUNTED_PARENTS,
            _STUCK_WAITING,
            _UNMARKED_PARENTS,
            _MISCOUNTED_BATCHES,
            _DEAF_LISTENERS,
        ),
        strict=True,
    )
)

#: The repair rounds' position, shared by every worker (``0015_repair_position``): the number
#: of the next range, a range being the ``REPAIR_RANGE`` ids from ``number * REPAIR_RANGE``. A
#: sequence, so taking a range neither blocks nor waits for a commit, and workers split the id
#: space between them. Not derived from the job table and not truth: losing it costs a pass.
REPAIR_POSITION = "pgqueue_repair_position"

#: The numbers of the next ``%(count)s`` ranges, and the newest job id (None: no jobs).
NEXT_RANGES = f"""SELECT
    ARRAY(SELECT nextval('{REPAIR_POSITION}') FROM generate_series(1, %(count)s)),
    (SELECT max(id) FROM {TABLE})"""

#: The number of the oldest job's range: where a pass starts.
FIRST_RANGE = f"SELECT coalesce(min(id), 0) / {REPAIR_RANGE} FROM {TABLE}"

#: Past the newest job: the next pass starts at the oldest job's range (its number is
#: returned: this round repairs it). Workers racing here only repair a range twice.
RESTART_PASS = f"SELECT setval('{REPAIR_POSITION}', ({FIRST_RANGE}))"

#: The oldest and newest job ids (None, None: no jobs), for ``pgqueue_repair``'s ranges.
ID_BOUNDS = f"SELECT min(id), max(id) FROM {TABLE}"

#: Whether the storage this module checks exists (an unmigrated or half-migrated database:
#: nothing to say). ``pgqueue_job_dependency`` comes with ``0022_workflows``, the last storage
#: the check reads.
STORAGE_READY = "SELECT to_regclass('pgqueue_job_dependency') IS NOT NULL"

_COPIED = ", ".join(COLUMNS)

# The repair goes through a range in batches, by id: :data:`CHECK_RANGE` looks at the first
# ``%(batch)s`` suspects from ``%(lo)s`` and the first ``%(batch)s`` stray rows from
# ``%(strays)s``, and returns where each kind's next batch starts (None: the range is done). A
# suspect or row it leaves (locked by a claim, say) is looked at again in the next pass.

#: One statement a range, in its own transaction (nothing to repair, the common case: one
#: round trip). Finds the pending jobs that are stranded, duplicated or disagreeing, for
#: :data:`LOCK_PENDING` and :data:`REDERIVE`; deletes the ready rows whose job is gone or not
#: pending, once the job, if any, is locked ``SKIP LOCKED`` (a job being changed is left for the
#: next pass: its trigger may be about to make the row right). Returns the suspects' next
#: batch's start and their ids, then the stray rows' next start and the job ids whose rows went.
CHECK_RANGE = f"""
WITH {_RANGE}, suspects AS MATERIALIZED (
    SELECT id FROM per_job WHERE n <> 1 OR NOT agree
    ORDER BY id LIMIT %(batch)s
), orphans AS MATERIALIZED (
    SELECT r.slot, r.ctid AS row_id, r.job_id FROM {READY_TABLE} r
    WHERE r.job_id >= %(strays)s AND r.job_id < %(hi)s
      AND {_status_of("r")} IS DISTINCT FROM {PENDING}
    ORDER BY r.job_id LIMIT %(batch)s
    FOR UPDATE OF r SKIP LOCKED
), locked AS MATERIALIZED (
    SELECT j.id FROM {TABLE} j WHERE j.id = ANY(ARRAY(SELECT job_id FROM orphans))
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {READY_TABLE} r
    USING orphans o
    WHERE r.slot = o.slot AND r.ctid = o.row_id
      AND (NOT EXISTS (SELECT 1 FROM {TABLE} j WHERE j.id = o.job_id)
           OR o.job_id IN (SELECT id FROM locked))
    RETURNING r.job_id
)
SELECT CASE WHEN (SELECT count(*) FROM suspects) = %(batch)s
            THEN (SELECT max(id) + 1 FROM suspects) END,
       ARRAY(SELECT id FROM suspects ORDER BY id),
       CASE WHEN (SELECT count(*) FROM orphans) = %(batch)s
            THEN (SELECT max(job_id) + 1 FROM orphans) END,
       ARRAY(SELECT DISTINCT job_id FROM gone ORDER BY job_id)
"""

#: Of the jobs ``%(ids)s``, those still pending, locked ``SKIP LOCKED`` as a claim locks them
#: first (a job a claim is taking right now is left alone; a job claimed since is no longer
#: pending once locked, so it is left too), for :data:`REDERIVE` in the same transaction. By
#: primary key; pending or not is asked of the locked row (the newest version), outside the
#: scan: with the status condition in it, the planner could read the partial index of pending
#: jobs instead, every dead entry of a pinned horizon with it.
LOCK_PENDING = f"""
WITH locked AS MATERIALIZED (
    SELECT j.id, j.status FROM {TABLE} j WHERE j.id = ANY(%(ids)s)
    ORDER BY j.id
    FOR UPDATE SKIP LOCKED
)
SELECT ARRAY(SELECT id FROM locked WHERE status = {PENDING} ORDER BY id)
"""

#: The jobs ``%(ids)s`` (locked by :data:`LOCK_PENDING`) get exactly the ready row each should
#: have. A statement of its own: its snapshot, taken once the jobs are locked, sees every row a
#: trigger gave them before, so none is left beside the new one.
REDERIVE = f"""
WITH gone AS (
    DELETE FROM {READY_TABLE} r WHERE r.job_id = ANY(%(ids)s)
)
INSERT INTO {READY_TABLE} (slot, job_id, {_COPIED})
SELECT pgqueue_ready_slot(j.id, j.run_after), j.id, {", ".join("j." + c for c in COLUMNS)}
FROM {TABLE} j WHERE j.id = ANY(%(ids)s)
"""


# Workflows' counts again from the jobs and their edges (F1-F3, B1): ``pgqueue_repair``. In
# one transaction, the edges and tallies locked against the triggers' writes (a parent's end
# waits for the repair, then counts on what it wrote); each statement a snapshot of its own.
REPAIR_WORKFLOWS = (
    f"LOCK TABLE {DEPENDENCY_TABLE}, {TALLY_TABLE} IN SHARE ROW EXCLUSIVE MODE",
    # F1: edges of children gone; satisfied as their parent is.
    f"""DELETE FROM {DEPENDENCY_TABLE} d
    WHERE NOT EXISTS (SELECT 1 FROM {TABLE} c WHERE c.id = d.child_id)""",
    f"""UPDATE {DEPENDENCY_TABLE} d SET satisfied = (p.status = {COMPLETED})
    FROM {TABLE} p WHERE p.id = d.parent_id AND d.satisfied <> (p.status = {COMPLETED})""",
    f"""UPDATE {TABLE} j SET parents_left = x.n
    FROM (SELECT child_id, count(*) FILTER (WHERE NOT satisfied) AS n FROM {DEPENDENCY_TABLE}
          GROUP BY child_id) x
    WHERE j.id = x.child_id AND j.parents_left IS DISTINCT FROM x.n""",
    # F3
    f"""UPDATE {TABLE} j SET dependents = true
    WHERE j.id IN (SELECT parent_id FROM {DEPENDENCY_TABLE}) AND NOT j.dependents""",
    # F2: released, or cancelled by the parent that failed (or is gone).
    f"""SELECT pgqueue_flow_cancel(d.parent_id, coalesce('ended ' || p.status, 'was deleted'),
                               d.child_id)
    FROM {DEPENDENCY_TABLE} d JOIN {TABLE} c ON c.id = d.child_id AND c.status = {_WAITING}
    LEFT JOIN {TABLE} p ON p.id = d.parent_id
    WHERE NOT d.satisfied AND (p.id IS NULL OR p.status IN ({_FAILED}))""",
    f"""UPDATE {TABLE} j SET status = {PENDING}
    WHERE j.status = {_WAITING} AND coalesce(j.parents_left, 0) <= 0""",
    # B1: each sealed batch's tally counted again; finished, or open again.
    f"DELETE FROM {TALLY_TABLE}",
    f"""WITH counted AS (
        SELECT j.batch_id, j.id / {BUCKET} AS bucket,
               count(*) FILTER (WHERE j.status IN ({sql_list(ACTIVE)})) AS unfinished,
               count(*) FILTER (WHERE j.status IN ({_FAILED})) AS failed
        FROM {TABLE} j JOIN {BATCH_TABLE} b ON b.id = j.batch_id AND b.sealed_at IS NOT NULL
        GROUP BY 1, 2
    )
    INSERT INTO {TALLY_TABLE} (batch_id, bucket, unfinished, failed)
    SELECT batch_id, bucket, unfinished, failed FROM counted""",
    f"""UPDATE {BATCH_TABLE} b SET
        buckets_left = (SELECT count(*) FROM {TALLY_TABLE} t
                        WHERE t.batch_id = b.id AND t.unfinished > 0),
        failed_buckets = (SELECT count(*) FROM {TALLY_TABLE} t
                          WHERE t.batch_id = b.id AND t.unfinished = 0 AND t.failed > 0)
    WHERE b.sealed_at IS NOT NULL""",
    f"""UPDATE {BATCH_TABLE} SET finished_at = NULL
    WHERE sealed_at IS NOT NULL AND finished_at IS NOT NULL AND buckets_left > 0""",
    f"""SELECT pgqueue_batch_finish(id) FROM {BATCH_TABLE}
    WHERE sealed_at IS NOT NULL AND finished_at IS NULL AND buckets_left = 0""",
)
