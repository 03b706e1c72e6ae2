"""Many workers (issue 35): the job notification carries a ticket, and ``enqueue()`` sends it
after its transaction commits.

* ``NOTIFY pgqueue, '<queue> <ticket> <jobs>'``: the ticket (the notifying transaction's id)
  picks which one of the listening workers of the queue claims (the wake rota,
  docs/worker.md), and ``jobs`` says how many it is about: one job wakes one worker, not all of
  them, and a worker passes on the wake of the jobs it had no room for. A worker of an older version reads the payload as a
  queue name: one serving every queue still wakes on it; one serving named queues polls until
  it is replaced (a rolling deploy's minutes).
* A transaction that set ``pgqueue.notify`` to ``after_commit`` (``enqueue()`` does, in the
  statement that inserts) is skipped: the application notifies once it has committed, in a
  transaction of its own, so the commit of the caller's data does not wait for the lock that
  serializes every committing transaction that notified (``PreCommit_Notify``), held across
  its WAL flush. Any other INSERT (raw SQL, COPY by hand) is notified in its own transaction,
  as before.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION pgqueue_notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('pgqueue.notify', true) = 'after_commit' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('pgqueue', q.queue || ' ' || txid_current() || ' ' || q.n)
    FROM (SELECT queue, count(*) AS n FROM inserted GROUP BY queue) q;
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
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0019_job_trace_context")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
