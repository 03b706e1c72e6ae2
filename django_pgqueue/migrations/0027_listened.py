"""Whether a listening worker serves a queue, as a function (issue 31's single enqueue).

Every inserting statement says whether the wake-up after its commit would be heard
(``sql.enqueue._LISTENED``). As an ``EXISTS`` subquery in the statement's ``RETURNING`` it was
parsed and planned with the statement, and ``enqueue()`` sends its statements unprepared: that
cost 0.15-0.2 ms of a 0.5 ms single enqueue (pgbench, simple protocol). The same test in a
PL/pgSQL function is planned once per session and kept; the statement calls it in a scalar
subquery, so once per statement whatever the rows.

The rule is ``pgqueue_wake``'s (``0020_wake_rota``, ``0026_wake_kinds``): a live listening
worker serving the queue. A new function: nothing is locked, no row is written.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """
CREATE FUNCTION pgqueue_listened(queue text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM pgqueue_worker w
        WHERE w.listening AND w.stopped_at IS NULL
          AND w.last_seen_at > now() - interval '5 minutes'
          AND (w.queues = '[]'::jsonb OR w.queues ? queue));
END;
$$;
"""

BACKWARD = """
DROP FUNCTION pgqueue_listened(text);
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0026_wake_kinds")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
