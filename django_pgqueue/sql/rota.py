"""The workers a job notification may wake: the wake rota (``worker.rota``)."""

from __future__ import annotations

from django_pgqueue.sql import WORKER_TABLE

#: The ``application_name`` of a worker's listening connection, before its worker id (cut to
#: PostgreSQL's 63 characters: ids of up to 46 characters are told apart).
LISTENER_PREFIX = "pgqueue listener "

#: Each live worker (not stopped, seen within ``%(alive)s`` seconds): its id, its queues, and
#: whether its listening connection to this database is open. That is read from
#: ``pg_stat_activity`` by ``application_name``, not from the worker's row: a process that dies
#: takes its connection with it at once, when its row says it is alive until its heartbeat is
#: overdue.
PEERS = f"""
SELECT w.worker_id, w.queues, l.application_name IS NOT NULL AS listening
FROM {WORKER_TABLE} w
LEFT JOIN (
    SELECT DISTINCT a.application_name FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND left(a.application_name, {len(LISTENER_PREFIX)}) = '{LISTENER_PREFIX}'
) l ON l.application_name = left('{LISTENER_PREFIX}' || w.worker_id, 63)
WHERE w.stopped_at IS NULL AND w.last_seen_at > now() - make_interval(secs => %(alive)s)
"""
