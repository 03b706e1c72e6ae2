"""The benchmark's own statements: its scratch rows, counts, ``VACUUM`` and server facts.

The only module of the benchmark that executes SQL on Django's connection. Queue operations
proper (enqueue, claim, finish) go through :mod:`django_pgqueue.operations`, as in production;
what is here exists for measuring only: a scratch queue's rows are made and deleted wholesale.
(``--compare``'s anchors run on connections of their own: the floor's statements are in
``floor.sql``, pgqueuer's are pgqueuer's; :func:`conninfo` is how they reach this database.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.db import connections
from django.utils import timezone

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench.workload import NOOP
from django_pgqueue.operations import Database
from django_pgqueue.sql import TABLE
from django_pgqueue.sql.limits import BUCKETS, EXACT_STARTS, WINDOW_TABLE
from django_pgqueue.sql.ready import HELD_TABLE, READY_TABLE
from django_pgqueue.states import JobStatus

VACUUM_ANALYZE = f"VACUUM (ANALYZE) {TABLE}"
#: The ready ring's partitions, the held one among them.
VACUUM_ANALYZE_READY = f"VACUUM (ANALYZE) {READY_TABLE}"
MAX_JOB_ID = f"SELECT coalesce(max(id), 0) FROM {TABLE}"
DELETE_QUEUE = f"DELETE FROM {TABLE} WHERE id > %s AND queue = %s"
#: Pending plus running jobs of a queue (two small partial-index scans).
COUNT_ACTIVE = (
    f"SELECT (SELECT count(*) FROM {TABLE} WHERE queue = %s AND status = '{JobStatus.PENDING}')"
    f" + (SELECT count(*) FROM {TABLE} WHERE queue = %s AND status = '{JobStatus.RUNNING}')"
)
STATUS_COUNTS = f"SELECT status, count(*) FROM {TABLE} WHERE id > %s AND queue = %s GROUP BY status"
LAST_FINISHED_AT = f"SELECT max(finished_at) FROM {TABLE} WHERE id > %s AND queue = %s"
FIRST_STARTED_AT = f"SELECT min(started_at) FROM {TABLE} WHERE id > %s AND queue = %s"
#: Checkpoints the server has made so far (each makes the next change of every page write the
#: whole page to the WAL): PostgreSQL 17 moved the counts to pg_stat_checkpointer.
CHECKPOINTS = "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
CHECKPOINTS_17 = "SELECT num_timed + num_requested FROM pg_stat_checkpointer"
BACKEND_PIDS = "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s"
BACKEND_PID = "SELECT pg_backend_pid()"
LISTENING = (
    "SELECT count(*) FROM pg_stat_activity WHERE left(application_name, %s) = %s "
    "AND query ILIKE 'LISTEN%%'"
)
SERVER_SETTINGS = ("server_version", "synchronous_commit", "shared_buffers", "autovacuum")
#: ``rows`` finished jobs: 90% completed, 10% dead with an error.
INSERT_HISTORY = f"""
    INSERT INTO {TABLE} (queue, name, args, kwargs, status, priority, run_after,
        attempts, max_attempts, locked_by, last_error, errors, result,
        created_at, started_at, finished_at)
    SELECT %s, '{NOOP}', '[]', '{{}}',
        CASE WHEN i %% 10 = 0 THEN '{JobStatus.DEAD}' ELSE '{JobStatus.COMPLETED}' END, 0, t,
        1, 1, 'pgqueue-bench-history',
        CASE WHEN i %% 10 = 0 THEN 'RuntimeError: boom' ELSE '' END,
        CASE WHEN i %% 10 = 0 THEN '[{{"attempt": 1, "exception_class": "RuntimeError"}}]'
             ELSE '[]' END::jsonb,
        CASE WHEN i %% 10 = 0 THEN NULL ELSE 'null' END::jsonb,
        t, t, t + interval '1 millisecond'
    FROM generate_series(1, %s) AS i,
         LATERAL (SELECT now() - (%s - i) * interval '1 millisecond') AS s(t)
"""
#: A bucketed rate window given ``starts`` recent starts: ``buckets`` buckets of a hundredth of
#: its period each, the newest the bucket of now (aligned as the claim aligns it, so its starts
#: add to it), the oldest ``buckets - 1`` periods/100 ago, the starts spread evenly over them.
FILL_WINDOW = f"""
UPDATE {WINDOW_TABLE} w SET (recent, counts, updated_at) = (
    SELECT array_agg(to_timestamp(
               (floor(extract(epoch FROM statement_timestamp()) / (w.period / {BUCKETS})) - b)
               * (w.period / {BUCKETS})) ORDER BY b DESC),
           array_agg((%(starts)s / %(buckets)s
                      + CASE WHEN b < %(starts)s %% %(buckets)s THEN 1 ELSE 0 END)::integer
                     ORDER BY b DESC),
           now()
    FROM generate_series(0, %(buckets)s - 1) AS b)
WHERE w.id = %(window)s AND w.starts > {EXACT_STARTS}
"""
#: A rate window with no recent start: room for its whole rate.
EMPTY_WINDOW = f"UPDATE {WINDOW_TABLE} SET recent = '{{}}', counts = '{{}}' WHERE id = %s"
#: How many entries a rate window keeps and how many starts they count.
WINDOW_STARTS = f"""
SELECT cardinality(recent), (SELECT coalesce(sum(coalesce(s.n, 1)), 0)
                             FROM unnest(recent, counts) AS s(t, n))
FROM {WINDOW_TABLE} WHERE id = %s
"""
HELD_ROWS = f"SELECT count(*) FROM {HELD_TABLE} WHERE queue = %s"


@contextlib.contextmanager
def _cursor() -> Iterator[Any]:
    with connections[settings.DATABASE].cursor() as cursor:
        yield cursor


def _execute(query: str, params: Sequence[Any] | dict[str, Any] | None = None) -> int:
    with _cursor() as cursor:
        cursor.execute(query, params)
        return int(cursor.rowcount)


def _fetchone(query: str, params: Sequence[Any] | None = None) -> Any:
    with _cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchone()


def drop_broken_connection() -> None:
    """Close the benchmark's connection if the server ended it, so the next query reconnects
    (Django reconnects only between requests)."""
    connection = connections[settings.DATABASE]
    if connection.connection is not None and not connection.is_usable():
        connection.close()


def vacuum_analyze() -> None:
    """So each measurement starts from a table autovacuum would have left (needs autocommit)."""
    _execute(VACUUM_ANALYZE)


def vacuum_analyze_ready() -> None:
    """The ready ring after rows were moved out of it wholesale (as autovacuum would)."""
    _execute(VACUUM_ANALYZE_READY)


def max_job_id() -> int:
    return int(_fetchone(MAX_JOB_ID)[0])


def delete_queue(queue: str, after_id: int) -> int:
    """Delete the scratch queue's rows (ids above ``after_id`` keep it a primary-key range)."""
    return _execute(DELETE_QUEUE, [after_id, queue])


def count_active(queue: str) -> int:
    """Pending plus running jobs of ``queue``."""
    return int(_fetchone(COUNT_ACTIVE, [queue, queue])[0])


def status_counts(queue: str, after_id: int) -> dict[str, int]:
    with _cursor() as cursor:
        cursor.execute(STATUS_COUNTS, [after_id, queue])
        return {row[0]: int(row[1]) for row in cursor.fetchall()}


def last_finished_at(queue: str, after_id: int) -> datetime:
    value: datetime = _fetchone(LAST_FINISHED_AT, [after_id, queue])[0]
    return value


def first_started_at(queue: str, after_id: int) -> datetime:
    value: datetime = _fetchone(FIRST_STARTED_AT, [after_id, queue])[0]
    return value


def insert_history(queue: str, rows: int) -> None:
    """``rows`` finished jobs in ``queue``, then VACUUM ANALYZE as autovacuum would after such
    a load."""
    _execute(INSERT_HISTORY, [queue, rows, rows])
    vacuum_analyze()


def fill_window(window: str, starts: int, buckets: int) -> None:
    """Give the bucketed rate window ``window`` ``starts`` recent starts over its newest
    ``buckets`` buckets (:data:`FILL_WINDOW`)."""
    if _execute(FILL_WINDOW, {"window": window, "starts": starts, "buckets": buckets}) != 1:
        raise ValueError(f"No bucketed rate window {window!r}")


def empty_window(window: str) -> None:
    _execute(EMPTY_WINDOW, [window])


def window_starts(window: str) -> tuple[int, int]:
    """(entries kept, starts counted) of the rate window ``window``."""
    entries, starts = _fetchone(WINDOW_STARTS, [window])
    return int(entries), int(starts)


def held_rows(queue: str) -> int:
    """Ready rows of ``queue`` held out of the ring (``sql.held``)."""
    return int(_fetchone(HELD_ROWS, [queue])[0])


def checkpoints() -> int:
    """Checkpoints made by the server since its statistics were reset (every database's)."""
    version = int(_fetchone("SHOW server_version_num")[0])
    return int(_fetchone(CHECKPOINTS_17 if version >= 170000 else CHECKPOINTS)[0])


def server_settings() -> dict[str, str]:
    """``SHOW`` of the server settings the figures depend on."""
    found = {}
    with _cursor() as cursor:
        for name in SERVER_SETTINGS:
            cursor.execute(f"SHOW {name}")
            found[name] = cursor.fetchone()[0]
    return found


def backend_pids(application_prefix: str) -> list[int]:
    """The server processes of connections whose application name starts with the prefix."""
    pattern = application_prefix.replace("%", r"\%").replace("_", r"\_") + "%"
    with _cursor() as cursor:
        cursor.execute(BACKEND_PIDS, [pattern])
        return [int(pid) for (pid,) in cursor.fetchall()]


def conninfo(application_name: str) -> str:
    """A libpq connection string to the benchmark's database (Django's settings for it),
    named ``application_name`` in ``pg_stat_activity``: for connections of plain psycopg."""
    params = connections[settings.DATABASE].get_connection_params()
    # What Django adds for its own psycopg connections, not libpq parameters.
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    params["application_name"] = application_name[:63]
    return str(psycopg.conninfo.make_conninfo(**params))


def backend_pid(connection: Database) -> int:
    """The server process serving ``connection``."""
    with connection.cursor() as cursor:
        cursor.execute(BACKEND_PID)
        return int(cursor.fetchone()[0])


def listening(worker_id: str) -> bool:
    """Whether the worker's listening connection has run LISTEN."""
    from django_pgqueue.sql.rota import LISTENER_TAG_LENGTH, listener_name

    tag = listener_name(worker_id)[:LISTENER_TAG_LENGTH]
    return bool(_fetchone(LISTENING, [LISTENER_TAG_LENGTH, tag])[0])


def workers_serving_every_queue() -> list[str]:
    """Live workers started without ``--queue`` (seen in the last two heartbeats)."""
    from django_pgqueue.models import Worker

    recent = timezone.now() - timedelta(seconds=2 * settings.HEARTBEAT_INTERVAL + 5)
    return list(
        Worker.objects.using(settings.DATABASE)
        .filter(stopped_at__isnull=True, last_seen_at__gte=recent, queues=[])
        .values_list("worker_id", flat=True)
    )


def delete_worker_rows(queue: str) -> None:
    """The worker rows of the benchmark's workers (their ids start with the scratch queue)."""
    from django_pgqueue.models import Worker

    Worker.objects.using(settings.DATABASE).filter(worker_id__startswith=queue).delete()
