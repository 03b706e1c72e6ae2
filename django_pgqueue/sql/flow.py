"""Statements of workflows: jobs enqueued after others, and batches (docs/workflows.md).

What a parent's end does to its dependents, and a member's to its batch, the triggers of
``0022_workflows`` and ``0025_batch_tally_per_statement`` do (their functions:
``sql/schema.sql``), in the transaction of the outcome: ``pgqueue_flow_settle`` (release,
cascade, retry), ``pgqueue_batch_members`` (a statement's members per bucket; a delete:
``pgqueue_batch_count``) and ``pgqueue_batch_finish``. These statements write what the enqueue
adds (the edges, the batch and its seal) and read what a job or the admin asks.
"""

from __future__ import annotations

from django_pgqueue.sql import TABLE
from django_pgqueue.sql.enqueue import _LISTENED, _NOTIFY_MODE, INSERT_COLUMNS
from django_pgqueue.states import ACTIVE, FINISHED, sql_list

DEPENDENCY_TABLE = "pgqueue_job_dependency"
BATCH_TABLE = "pgqueue_batch"
TALLY_TABLE = "pgqueue_batch_tally"
#: Member ids per bucket of a batch's tally (``pgqueue_batch_members``: ``id / 128``).
BUCKET = 128

#: Of ``%s`` (job ids), those that exist.
EXISTING = f"SELECT id FROM {TABLE} WHERE id = ANY(%s::bigint[])"

# A job of a workflow: the columns of a limited job (``sql.enqueue``), and its status
# (``waiting`` with parents), how many parents it waits for, its batch.
_FLOW_COLUMNS = (
    *INSERT_COLUMNS,
    "concurrency_limit",
    "rate_key",
    "status",
    "parents_left",
    "batch_id",
)
INSERT_ONE = f"""
INSERT INTO {TABLE} ({", ".join(_FLOW_COLUMNS)})
VALUES (%s, %s, %s::jsonb, %s::jsonb, %s, coalesce(%s, now()), %s, %s, %s, %s::jsonb,
        %s::boolean, %s, %s, %s, %s::integer, %s::bigint)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND status IN ({sql_list(ACTIVE)})
DO NOTHING
RETURNING id, run_after, created_at, {_NOTIFY_MODE}, {_LISTENED}
"""

#: Many jobs of a workflow (``insert_many``), ids reserved first (``sql.enqueue.RESERVE_IDS``).
COPY_MANY = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key,
              is_async, concurrency_limit, rate_key, trace_context, status, parents_left,
              batch_id)
FROM STDIN
"""

#: The edges of the children ``%s`` to each of the parents ``%s``: each checked, and its
#: parent marked, as the transaction commits (``pgqueue_flow_edge``).
INSERT_EDGES = f"""
INSERT INTO {DEPENDENCY_TABLE} (child_id, parent_id)
SELECT c, p FROM unnest(%s::bigint[]) AS c, unnest(%s::bigint[]) AS p
"""

#: A job's parents and their stored results (a parent deleted since: left out).
PARENT_RESULTS = f"""
SELECT d.parent_id, p.result FROM {DEPENDENCY_TABLE} d
JOIN {TABLE} p ON p.id = d.parent_id
WHERE d.child_id = %s::bigint
ORDER BY d.parent_id
"""

#: The jobs ``%s`` waits for, and those that wait for it (ids and statuses; a parent deleted
#: since has a NULL status).
PARENTS = f"""
SELECT d.parent_id, p.status FROM {DEPENDENCY_TABLE} d
LEFT JOIN {TABLE} p ON p.id = d.parent_id
WHERE d.child_id = %s::bigint ORDER BY d.parent_id
"""
DEPENDENTS = f"""
SELECT d.child_id, c.status FROM {DEPENDENCY_TABLE} d
JOIN {TABLE} c ON c.id = d.child_id
WHERE d.parent_id = %s::bigint ORDER BY d.child_id
"""

#: A new batch, in the caller's transaction; returns its id.
INSERT_BATCH = f"""
INSERT INTO {BATCH_TABLE} (description, on_success, on_failure, on_complete)
VALUES (%s, %s::jsonb, %s::jsonb, %s::jsonb)
RETURNING id
"""

#: The batch ``%s``'s block closed and its members are committed (``pgqueue_batch_seal``).
SEAL_BATCH = "SELECT pgqueue_batch_seal(%s::bigint)"

#: The batch ``%s``'s members by status.
BATCH_COUNTS = f"""
SELECT status, count(*) FROM {TABLE} WHERE batch_id = %s::bigint GROUP BY status
"""

#: The batch a job is a member of, or whose callback it is.
BATCH_OF = f"SELECT coalesce(batch_id, callback_of) FROM {TABLE} WHERE id = %s::bigint"

#: Pruning keeps a finished parent while a dependent of it has not ended (F4): the prune
#: statements' condition, on the job ``j``.
KEEP_PARENT = f"""NOT (j.dependents AND EXISTS (
    SELECT 1 FROM {DEPENDENCY_TABLE} d JOIN {TABLE} c ON c.id = d.child_id
    WHERE d.parent_id = j.id AND c.status NOT IN ({sql_list(FINISHED)})))"""
