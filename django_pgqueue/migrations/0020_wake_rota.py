"""Many workers (issue 35): a job notification wakes the one worker its ticket picks, and
``enqueue()`` sends it after its transaction commits.

* ``pgqueue_wake(queues, jobs, tickets)`` sends, for each queue, ``NOTIFY '<queue> <ticket>
  <jobs>'`` (the ticket: the first job's id, so consecutive enqueues take turns) on the own
  channel (``pgqueue.`` and 20 hex digits of the md5 of its id) of the worker the ticket picks
  among the live listening workers of the queue sorted by id (``pgqueue_worker.listening``,
  below): ``rota[ticket mod len(rota)]``. No other worker, nor its process, wakes
  (the wake rota, docs/worker.md). With none listening, nothing: no NOTIFY, whose commit is
  serialized, for nobody (the workers poll). A function, so that its plan is made once a
  session, not at every enqueue.
* The insert trigger calls it, unless the transaction set ``pgqueue.notify`` to
  ``after_commit`` (``enqueue()`` does, in the statement that inserts): then the application
  calls it once it has committed, in a transaction of its own, so that the commit of the
  caller's rows does not wait for the lock that serializes every committing transaction that
  notified (``PreCommit_Notify``), held across its WAL flush. Any other INSERT (raw SQL, COPY
  by hand) is notified inside its own transaction.

``pgqueue_worker.listening`` says whether the worker's listening connection is open: set by the
worker when it LISTENs and at each heartbeat, cleared when it stops, and by any worker's rota
reading for a row whose connection is gone (S12 in docs/storage.md). Derived, never truth: a
wrong value costs a poll, not a job. A constant default: adding it rewrites no row, and a worker
of an older version (which does not name it) still registers, as not listening.

A worker of an older version LISTENs on ``pgqueue`` only, and is not marked listening: it is
never notified (a rolling deploy's minutes: it polls). ``NOTIFY pgqueue, '<queue>'`` by hand
still wakes every worker of the queue.
"""

from __future__ import annotations

from django.db import migrations, models

FORWARD = """
CREATE FUNCTION pgqueue_wake(queues text[], jobs integer[], tickets bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(r.channel, w.q || ' ' || w.t || ' ' || w.n)
    FROM unnest(queues, jobs, tickets) AS w(q, n, t)
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

CREATE OR REPLACE FUNCTION pgqueue_notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('pgqueue.notify', true) = 'after_commit' THEN
        RETURN NULL;
    END IF;
    PERFORM pgqueue_wake(array_agg(q.queue), array_agg(q.n), array_agg(q.first))
    FROM (SELECT queue, count(*)::integer AS n, min(id) AS first
          FROM inserted GROUP BY queue) q;
    RETURN NULL;
END;
$$;
"""

BACKWARD = """
CREATE OR REPLACE FUNCTION pgqueue_notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgqueue', q.queue) FROM (SELECT DISTINCT queue FROM inserted) q;
    RETURN NULL;
END;
$$;
DROP FUNCTION pgqueue_wake(text[], integer[], bigint[]);
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0019_job_trace_context")]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="listening",
            field=models.BooleanField(
                default=False,
                db_default=False,
                help_text="Its listening connection is open: enqueue() may wake it directly.",
            ),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
