"""A batch callback that is an ``async def`` job is inserted as one (S13 in docs/storage.md):
``batch()`` stores its kind in the callback's JSON (``"is_async"``), and
``pgqueue_batch_finish`` writes it to the callback's row. A callback stored before (no key) is
inserted sync, as ``0022_workflows`` did: the worker still runs it by its function's kind, only
counted against the sync room of a claim.

The function alone changes (``CREATE OR REPLACE``: no lock on the job table).
"""

from __future__ import annotations

from django.db import migrations


def _finish(is_async: str) -> str:
    """``pgqueue_batch_finish``, whose callbacks' ``is_async`` is ``is_async`` (SQL)."""
    columns = "queue, name, args, kwargs, priority, max_attempts, callback_of"
    values = (
        "cb.sig ->> 'queue', cb.sig ->> 'name', cb.sig -> 'args', cb.sig -> 'kwargs',\n"
        "                (cb.sig ->> 'priority')::smallint, (cb.sig ->> 'max_attempts')::integer, b"
    )
    if is_async:
        columns += ", is_async"
        values += f",\n                {is_async}"
    return f"""
-- Batch `b`, sealed with no bucket left, finishes: its callbacks are enqueued, once (the row
-- lock and `finished_at IS NULL`), and recorded in `fired`.
CREATE OR REPLACE FUNCTION pgqueue_batch_finish(b bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    bt record;
    cb record;
    new_id bigint;
    v_fired jsonb := '[]';
BEGIN
    UPDATE pgqueue_batch SET finished_at = now()
    WHERE id = b AND sealed_at IS NOT NULL AND finished_at IS NULL AND buckets_left = 0
    RETURNING * INTO bt;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR cb IN
        SELECT c.callback, c.sig FROM (VALUES
            (1, 'on_success', CASE WHEN bt.failed_buckets = 0 THEN bt.on_success END),
            (2, 'on_failure', CASE WHEN bt.failed_buckets > 0 THEN bt.on_failure END),
            (3, 'on_complete', bt.on_complete)) AS c(n, callback, sig)
        WHERE c.sig IS NOT NULL AND c.sig <> 'null'::jsonb
        ORDER BY c.n
    LOOP
        INSERT INTO pgqueue_job ({columns})
        VALUES ({values})
        RETURNING id INTO new_id;
        v_fired := v_fired || jsonb_build_object('callback', cb.callback, 'job', new_id,
                                                 'at', now());
    END LOOP;
    UPDATE pgqueue_batch SET fired = fired || v_fired WHERE id = b;
END;
$$;
"""


FORWARD = _finish("coalesce((cb.sig ->> 'is_async')::boolean, false)")
BACKWARD = _finish("")


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0023_workflows_online")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
