"""The storage's invariants as queries, and the statements that restore them.

``docs/storage.md`` numbers the invariants; each query here finds the jobs that break one:

* S1 ``stranded``: a pending job without a ready row. No claim can reach it.
* S1 ``duplicated``: a job with more than one ready row.
* S2 ``disagreeing``: a ready row whose copy of its pending job (queue, priority,
  ``run_after``, keys, limit) is not what the job says.
* S3 ``orphaned``: a ready row whose job is gone or not pending.
* S7 ``misshapen_windows``: a rate window larger than its bound, or whose counts do not match
  its entries (reported; the repair leaves windows alone).

:data:`VIOLATIONS` reads them in one statement (one snapshot: right while workers drain), each
as a count and the first ids. The triggers keep every one of them in the job's own
transaction; they are broken only by writes that bypass triggers (``session_replication_role
= replica``, a logical-replication apply, ``pg_restore --disable-triggers``, ``ALTER TABLE ...
DISABLE TRIGGER``) or by a bug. :data:`REPAIR_JOBS` and :data:`DROP_ORPHANS` restore them.
"""

from __future__ import annotations

from django_pgqueue.sql import PENDING, TABLE
from django_pgqueue.sql.limits import BUCKETS, WINDOW_TABLE
from django_pgqueue.sql.ready import COLUMNS, READY_TABLE, agrees

#: How many ids each violation names.
FIRST_IDS = 10

_STRANDED = f"""SELECT j.id FROM {TABLE} j
    WHERE j.status = {PENDING}
      AND NOT EXISTS (SELECT 1 FROM {READY_TABLE} r WHERE r.job_id = j.id)"""

_DUPLICATED = f"""SELECT r.job_id AS id FROM {READY_TABLE} r
    GROUP BY r.job_id HAVING count(*) > 1"""

_DISAGREEING = f"""SELECT DISTINCT r.job_id AS id FROM {READY_TABLE} r
    JOIN {TABLE} j ON j.id = r.job_id
    WHERE j.status = {PENDING} AND NOT ({agrees("j", "r")})"""


def _status_of(row: str) -> str:
    """The status of the job of the ready row ``row`` (NULL: gone), by its id alone behind
    ``OFFSET 0``: the primary key is the only index the lookup can use (with the status
    condition in it, the planner could read the partial index of pending jobs whole for each
    row, every dead entry of a pinned xmin horizon: 4 s a statement under pressure)."""
    return f"(SELECT j.status FROM {TABLE} j WHERE j.id = {row}.job_id OFFSET 0)"


_ORPHANED = f"""SELECT DISTINCT r.job_id AS id FROM {READY_TABLE} r
    WHERE {_status_of("r")} IS DISTINCT FROM {PENDING}"""

# S7's part the storage can show: a window stays about a hundred entries whatever its rate
# (its starts' times up to ``limits.EXACT_STARTS`` a period, else one entry per bucket), and
# ``counts`` is empty or has one count per entry of ``recent``.
_MISSHAPEN_WINDOWS = f"""SELECT w.id FROM {WINDOW_TABLE} w
    WHERE cardinality(w.recent) > greatest(w.starts, {BUCKETS + 2})
       OR cardinality(w.counts) NOT IN (0, cardinality(w.recent))"""

#: Which kinds of violation there are, in the order :data:`VIOLATIONS` returns them (all but
#: the last name jobs; ``misshapen_windows`` names rate windows).
KINDS = ("stranded", "duplicated", "disagreeing", "orphaned", "misshapen_windows")


def _summary(kind: str, ids: str) -> str:
    return f"""SELECT '{kind}' AS kind, count(*) AS n,
        (array_agg(v.id::text ORDER BY v.id))[1:{FIRST_IDS}] AS first
    FROM ({ids}) v"""


#: ``(kind, count, first ids as text)`` for each kind, every kind once (count 0: none).
VIOLATIONS = "\nUNION ALL\n".join(
    _summary(kind, ids)
    for kind, ids in zip(
        KINDS,
        (_STRANDED, _DUPLICATED, _DISAGREEING, _ORPHANED, _MISSHAPEN_WINDOWS),
        strict=True,
    )
)

#: Whether the storage this module checks exists (an unmigrated or half-migrated database:
#: nothing to say). ``pgqueue_ready_job`` comes with ``0012_ready_follows_job``.
STORAGE_READY = "SELECT to_regclass('pgqueue_ready_job') IS NOT NULL"

_COPIED = ", ".join(COLUMNS)

#: Pending jobs that are stranded, duplicated or disagreeing (at most ``%(batch)s``): each
#: job's rows are replaced by the one it should have. The job rows are locked ``SKIP
#: LOCKED``, as a claim locks them first: a job a claim is taking right now is left alone,
#: and a job claimed since this statement's snapshot is no longer pending when locked, so it
#: is left too. Returns the ids repaired.
REPAIR_JOBS = f"""
WITH suspects AS (
    SELECT id FROM ({_STRANDED}) s
    UNION SELECT id FROM ({_DUPLICATED}) d
    UNION SELECT id FROM ({_DISAGREEING}) g
    LIMIT %(batch)s
), jobs AS MATERIALIZED (
    SELECT j.id, {", ".join("j." + c for c in COLUMNS)} FROM {TABLE} j
    WHERE j.id = ANY(ARRAY(SELECT id FROM suspects)) AND j.status = {PENDING}
    ORDER BY j.id
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {READY_TABLE} r WHERE r.job_id = ANY(ARRAY(SELECT id FROM jobs))
), put AS (
    INSERT INTO {READY_TABLE} (slot, job_id, {_COPIED})
    SELECT pgqueue_ready_slot(id, run_after), id, {_COPIED} FROM jobs
)
SELECT id FROM jobs ORDER BY id
"""

#: Ready rows whose job is gone or not pending (at most ``%(batch)s``), deleted. The job, if
#: any, is locked ``SKIP LOCKED`` first (a job being changed is left for the next round: its
#: trigger may be about to make the row right). Returns the job ids whose rows went.
DROP_ORPHANS = f"""
WITH orphans AS (
    SELECT r.slot, r.ctid AS row_id, r.job_id FROM {READY_TABLE} r
    WHERE {_status_of("r")} IS DISTINCT FROM {PENDING}
    LIMIT %(batch)s
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
SELECT DISTINCT job_id FROM gone ORDER BY job_id
"""
