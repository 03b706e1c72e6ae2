"""A queue's own limits hold its backlog too (``django_pgqueue.sql.held``): rows with neither
key, of a queue with a concurrency or rate limit of its own, beyond the few the ring keeps. The
held partition gets an index of them in the claims' order; going back puts them into the ring
again.

The SQL is frozen as it ran: the statements of ``sql/`` may change, this migration never does.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """
CREATE INDEX pgqueue_ready_held_queue ON pgqueue_ready_held (queue, priority DESC, run_after, job_id)
    WHERE (concurrency_key IS NULL AND rate_key IS NULL);
"""

BACKWARD = """

WITH m AS (DELETE FROM pgqueue_ready r WHERE r.slot = -3 AND (r.concurrency_key IS NULL AND r.rate_key IS NULL) RETURNING r.*)
INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
SELECT pgqueue_ready_slot(m.job_id, m.run_after), m.job_id, m.queue, m.priority, m.run_after, m.concurrency_key, m.rate_key, m.concurrency_limit FROM m
;
DROP INDEX pgqueue_ready_held_queue;
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0010_job_serial_scans")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
