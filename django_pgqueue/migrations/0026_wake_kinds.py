"""A wake-up says which kinds of jobs it is about (issue 31's pickup, issue 34's claim).

``pgqueue_wake(queues, jobs, tickets, kinds)`` is ``pgqueue_wake(queues, jobs, tickets)``
(``0020_wake_rota``) with, per queue, the kinds of the jobs enqueued: ``'s'`` (sync jobs only),
``'a'`` (async only), ``'sa'`` (both). The payload becomes ``'<queue> <ticket> <jobs> <hops>
<kinds>'`` (hops 0: the enqueue's own wake-up). A worker woken for sync jobs alone, whose last
look for async jobs found none, claims without the async jobs' branch (``sql.ready.by_kind``).
A NULL kind sends the payload of ``0020_wake_rota``, which a worker takes as "either kind", as
it takes every wake-up of the insert trigger (the three-argument function, unchanged) and of an
older version.

A new function beside the old one: nothing is locked, no row is written.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """
CREATE FUNCTION pgqueue_wake(queues text[], jobs integer[], tickets bigint[], kinds text[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(r.channel, w.q || ' ' || w.t || ' ' || w.n
                                 || coalesce(' 0 ' || w.kind, ''))
    FROM unnest(queues, jobs, tickets, kinds) AS w(q, n, t, kind)
    JOIN LATERAL (
        SELECT 'pgqueue.' || left(md5(x.worker_id), 20) AS channel
        FROM (
            SELECT p.worker_id,
                   row_number() OVER (ORDER BY p.worker_id COLLATE "C") - 1 AS k,
                   count(*) OVER () AS size
            FROM pgqueue_worker p
            WHERE p.listening AND p.stopped_at IS NULL
              AND p.last_seen_at > now() - interval '5 minutes'
              AND (p.queues = '[]'::jsonb OR p.queues ? w.q)
        ) x
        WHERE x.k = w.t % x.size
    ) r ON true;
END;
$$;
"""

BACKWARD = """
DROP FUNCTION pgqueue_wake(text[], integer[], bigint[], text[]);
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0025_batch_tally_per_statement")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
