"""Statements of queue control: a queue's row in ``pgqueue_queue`` (paused, limits).

No row means "running, no limits": resuming a queue with no limits deletes its row, so a
database without any control settings has an empty table and the claim its plain statement.
Every change sends ``NOTIFY pgqueue_control, 'queues'`` when it commits.
"""

from __future__ import annotations

QUEUE_TABLE = "pgqueue_queue"

SET_PAUSED = f"""
INSERT INTO {QUEUE_TABLE} (name, paused, updated_at) VALUES (%s, %s, now())
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()
"""

SET_LIMITS = f"""
INSERT INTO {QUEUE_TABLE} (name, paused, concurrency_limit, rate_limit, updated_at)
VALUES (%s, false, %s, %s, now())
ON CONFLICT (name) DO UPDATE
SET concurrency_limit = EXCLUDED.concurrency_limit, rate_limit = EXCLUDED.rate_limit,
    updated_at = now()
"""

#: A row that says nothing any more ("running, no limits") is deleted.
DROP_IF_DEFAULT = f"""
DELETE FROM {QUEUE_TABLE}
WHERE name = %s AND NOT paused AND concurrency_limit IS NULL AND rate_limit IS NULL
"""

#: What the workers keep in memory, refreshed on NOTIFY (or about once a second without it).
CONTROLS = f"SELECT name, paused, concurrency_limit, rate_limit FROM {QUEUE_TABLE}"


def not_paused(queue_column: str) -> str:
    """A claim filter fragment: the job's queue (``queue_column``) is not paused."""
    return f"""NOT EXISTS (SELECT 1 FROM {QUEUE_TABLE} qc
                WHERE qc.name = {queue_column} AND qc.paused)"""
