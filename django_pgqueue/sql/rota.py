"""The workers a job notification may wake: the wake rota (``worker.rota``)."""

from __future__ import annotations

import hashlib

from django_pgqueue.sql import NOTIFY_CHANNEL, WORKER_TABLE

#: The ``application_name`` of a worker's listening connection, before its worker id (cut to
#: PostgreSQL's 63 characters: ids of up to 46 characters are told apart).
LISTENER_PREFIX = "pgqueue listener "


def channel(worker_id: str) -> str:
    """The worker's own notification channel: ``pgqueue.`` and 20 hex digits of the md5 of its
    id (a channel name is an identifier: 63 characters at most, whatever the id), as
    ``pgqueue_wake`` (migration ``0020_wake_rota``) computes it."""
    return f"{NOTIFY_CHANNEL}." + hashlib.md5(worker_id.encode()).hexdigest()[:20]


#: The ``application_name`` of every open listening connection to this database.
LIVE_LISTENERS = f"""SELECT DISTINCT a.application_name FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND left(a.application_name, {len(LISTENER_PREFIX)}) = '{LISTENER_PREFIX}'"""
#: The ``application_name`` the listening connection of the worker row ``w`` has.
LISTENER_OF = f"left('{LISTENER_PREFIX}' || w.worker_id, 63)"

#: Each live worker (not stopped, seen within ``%(alive)s`` seconds): its id, its queues, and
#: whether its listening connection to this database is open. That is read from
#: ``pg_stat_activity`` by ``application_name``, not from the worker's row: a process that dies
#: takes its connection with it at once, when its row says it is alive until its heartbeat is
#: overdue. A row that says ``listening`` with no such connection is corrected on the way (S12):
#: ``enqueue()`` picks the worker to wake from the rows.
PEERS = f"""
WITH live AS MATERIALIZED ({LIVE_LISTENERS}),
corrected AS (
    UPDATE {WORKER_TABLE} w SET listening = false
    WHERE w.listening
      AND NOT EXISTS (SELECT 1 FROM live l WHERE l.application_name = {LISTENER_OF})
)
SELECT w.worker_id, w.queues, l.application_name IS NOT NULL AS listening
FROM {WORKER_TABLE} w
LEFT JOIN live l ON l.application_name = {LISTENER_OF}
WHERE w.stopped_at IS NULL AND w.last_seen_at > now() - make_interval(secs => %(alive)s)
"""

#: The worker's listening connection is open (it LISTENs on its channel now).
MARK_LISTENING = f"UPDATE {WORKER_TABLE} SET listening = true WHERE worker_id = %s"
