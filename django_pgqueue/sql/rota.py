"""The workers a job notification may wake: the wake rota (``worker.rota``)."""

from __future__ import annotations

import hashlib

from django_pgqueue.sql import NOTIFY_CHANNEL, WORKER_TABLE

#: The ``application_name`` of a worker's listening connection starts so, then the worker's
#: tag (:func:`listener_name`).
LISTENER_PREFIX = "pgqueue listener "
#: 20 hex digits of the md5 of a worker's id: its tag, in its channel and its listener's name.
_TAG_DIGITS = 20
#: How much of a listener's ``application_name`` names its worker: the prefix and the tag.
LISTENER_TAG_LENGTH = len(LISTENER_PREFIX) + _TAG_DIGITS


def tag(worker_id: str) -> str:
    """20 hex digits of the md5 of ``worker_id``: the worker's tag, in its channel and in the
    name of its listening connection."""
    return hashlib.md5(worker_id.encode()).hexdigest()[:_TAG_DIGITS]


def channel(worker_id: str) -> str:
    """The worker's own notification channel: ``pgqueue.`` and its tag (a channel name is an
    identifier: 63 characters at most, whatever the id), as ``pgqueue_wake`` (migration
    ``0020_wake_rota``) computes it."""
    return f"{NOTIFY_CHANNEL}.{tag(worker_id)}"


def listener_name(worker_id: str) -> str:
    """The ``application_name`` of the worker's listening connection: the prefix, its tag, then
    its id for people reading ``pg_stat_activity``. The rota knows a listener by the first
    :data:`LISTENER_TAG_LENGTH` characters alone: PostgreSQL cuts an ``application_name`` to
    63 bytes and turns each byte that is not printable ASCII into ``?`` (``\\x..`` from
    PostgreSQL 16), so a long id, or one such as ``wörker``, would never match its own name."""
    return f"{LISTENER_PREFIX}{tag(worker_id)} {worker_id}"


#: The start of the ``application_name`` (prefix and tag) of every open listening connection to
#: this database, in one array: one row, ``names``. Each worker row is then tested against it
#: once (``= ANY``): a join of the rows with the connections, estimated at one row each, was
#: planned as a nested loop that computed the md5 of every worker id once per connection (1,600
#: times for 40 workers: 3-6 ms a reading, against 0.9 ms).
LIVE_LISTENERS = f"""SELECT
        coalesce(array_agg(DISTINCT left(a.application_name, {LISTENER_TAG_LENGTH})), '{{}}')
        AS names
    FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND left(a.application_name, {len(LISTENER_PREFIX)}) = '{LISTENER_PREFIX}'"""
#: The start of the ``application_name`` the listening connection of the worker row ``w`` has:
#: the tag of the connection that listens for it (``listener``: the relay of its ``run_jobs
#: --processes``, ``worker.relay``), else its own.
LISTENER_OF = f"'{LISTENER_PREFIX}' || coalesce(w.listener, left(md5(w.worker_id), {_TAG_DIGITS}))"

#: Each live worker (not stopped, seen within ``%(alive)s`` seconds): its id, its queues, and
#: whether its listening connection to this database is open. That is read from
#: ``pg_stat_activity`` by ``application_name``, not from the worker's row: a process that dies
#: takes its connection with it at once, when its row says it is alive until its heartbeat is
#: overdue. A row that says ``listening`` with no such connection is corrected on the way (S12):
#: ``enqueue()`` picks the worker to wake from the rows. Sorted as ``pgqueue_wake()`` sorts them
#: (by byte, so every worker's reading and every enqueue agree on who is n-th).
PEERS = f"""
WITH live AS MATERIALIZED ({LIVE_LISTENERS}),
corrected AS (
    UPDATE {WORKER_TABLE} w SET listening = false
    FROM live
    WHERE w.listening AND NOT ({LISTENER_OF} = ANY(live.names))
)
SELECT w.worker_id, w.queues, {LISTENER_OF} = ANY(live.names) AS listening
FROM {WORKER_TABLE} w CROSS JOIN live
WHERE w.stopped_at IS NULL AND w.last_seen_at > now() - make_interval(secs => %(alive)s)
ORDER BY w.worker_id COLLATE "C"
"""

#: The worker's listening connection is open (it LISTENs on its channel now): its own
#: (``listener`` NULL), or the relay's whose tag it names. A row locked meanwhile (its
#: heartbeat, a reading of the rota, a transaction of someone's) is left to the worker's next
#: heartbeat, which writes the same: a listener, the relay above all, which listens for every
#: process of its host, never waits on a row lock.
MARK_LISTENING = f"""
UPDATE {WORKER_TABLE} SET listening = true, listener = %(listener)s
WHERE worker_id = (
    SELECT worker_id FROM {WORKER_TABLE} WHERE worker_id = %(id)s FOR UPDATE SKIP LOCKED
)"""
