"""The worker's own database connections.

The worker claims, heartbeats and writes outcomes on a connection of its own, separate from the
Django connections job code uses: jobs may open transactions, fail them or close their
connection without disturbing the queue. It is a plain psycopg connection configured exactly as
Django configures its own (UTC, autocommit, jsonb loaded as text), so ``operations``
reads its rows the same way.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import UTC
from typing import Any

import psycopg
import psycopg.errors
from django.db import connections

from django_pgqueue.conf import settings
from django_pgqueue.operations.db import CONNECTION_ERRORS
from django_pgqueue.printable import get_logger
from django_pgqueue.sql import PLANNED_EACH_TIME

logger = get_logger("django_pgqueue.worker")

#: What a statement prepared on another server connection looks like from here.
PREPARED_STATEMENT_ERRORS: tuple[type[Exception], ...] = (
    psycopg.errors.InvalidSqlStatementName,  # prepared statement "_pg3_0" does not exist
    psycopg.errors.DuplicatePreparedStatement,  # prepared statement "_pg3_0" already exists
)


def behind_a_pooler(conn: psycopg.Connection[Any]) -> bool:
    """True if ``conn`` reaches PostgreSQL through a pooler (PgBouncer, Pgpool, a cloud proxy).

    A server announces its backend's pid when a session starts; a pooler announces one of its
    own (it answers the startup itself), so the pid the session reports differs. One round trip,
    made once per connection, only while prepared statements are on.
    """
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return row is not None and row[0] != conn.info.backend_pid


#: Index scans only, no JIT, one plan per statement: see ``QueueConnection._open``.
SET_WORKER_SESSION = (
    "SET enable_seqscan = off; SET enable_bitmapscan = off; SET jit = off; "
    "SET plan_cache_mode = force_generic_plan"
)


# The worker's cursor: each statement's placeholders converted once, not at every execution.
#
# ``operations`` writes its SQL with psycopg's placeholders (``%s``, ``%(name)s``), which Django's
# cursors take too. A psycopg cursor converts them into PostgreSQL's (``$1``) at every execution,
# and caches the conversion only for statements up to 4,096 bytes: the claim (5.5 KB), the
# limited claim (8 KB) and the held sweep (7 KB) were split by a regular expression on every
# call, 20 us of Python each before the statement left (more after an idle pause). The worker's
# connection uses :class:`NativeCursor` instead: a ``RawCursor`` (PostgreSQL's placeholders),
# given each statement converted once (:func:`native`), encoded, with the order of its
# parameters.

_PLACEHOLDER = re.compile(r"%(?:\((\w+)\))?s|%%")


@functools.lru_cache(maxsize=512)
def native(query: str, encoding: str) -> tuple[bytes, tuple[str, ...] | int]:
    """``query`` with ``$n`` for its placeholders, encoded; and the names of its parameters in
    ``$n`` order (``%(name)s``: a name used twice is one parameter, as psycopg does), or how
    many it takes (``%s``). ``%%`` is a ``%``."""
    names: dict[str, int] = {}
    positional = 0

    def number(match: re.Match[str]) -> str:
        nonlocal positional
        if match.group(0) == "%%":
            return "%"
        name = match.group(1)
        if name is None:
            positional += 1
            return f"${positional}"
        return f"${names.setdefault(name, len(names) + 1)}"

    text = _PLACEHOLDER.sub(number, query)
    if names and positional:
        raise TypeError("a statement mixes %s and %(name)s placeholders")
    return text.encode(encoding), tuple(names) if names else positional


#: A statement whose text holds this comment is never prepared: PostgreSQL plans it at each
#: execution, for the table as it is then (``sql.PLANNED_EACH_TIME``).
@functools.lru_cache(maxsize=512)
def planned_each_time(query: str) -> bool:
    return PLANNED_EACH_TIME in query


class NativeCursor(psycopg.RawCursor[Any]):
    """``execute()`` takes psycopg's placeholders and runs the statement converted once."""

    def execute(  # type: ignore[override]
        self,
        query: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> NativeCursor:
        if prepare is None and planned_each_time(query):
            prepare = False
        if params is None:  # sent as it is, as psycopg's cursor does
            super().execute(query, prepare=prepare, binary=binary)
            return self
        text, order = native(query, self.connection.info.encoding)
        if isinstance(order, tuple):
            if not isinstance(params, Mapping):
                raise TypeError("named placeholders take a mapping of parameters")
            values = [params[name] for name in order]
        else:
            if isinstance(params, Mapping):
                raise TypeError("%s placeholders take a sequence of parameters")
            values = list(params)
            if len(values) != order:
                raise TypeError(f"the statement takes {order} parameters, {len(values)} given")
        super().execute(text, values, prepare=prepare, binary=binary)
        return self


def use_native_timestamps(wrapper: Any) -> None:
    """Load ``timestamptz`` with psycopg's own loader on the worker's connection where it gives
    what Django's does: in a UTC session (``USE_TZ = True``), both return aware datetimes in
    ``datetime.timezone.utc``. Django's loader wraps psycopg's in Python (its result's
    ``replace(tzinfo=...)``): 0.35 us a value, five values a claimed job."""
    connection = wrapper.connection
    if wrapper.timezone is not UTC or connection.info.parameter_status("TimeZone") != "UTC":
        return
    oid = psycopg.postgres.types["timestamptz"].oid
    native = psycopg.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
    if native is not None:
        connection.adapters.register_loader("timestamptz", native)


def unpooled_wrapper(alias: str, application_name: str) -> Any:
    """A new Django connection to ``alias`` (not connected yet) that never comes from a
    connection pool, named ``application_name`` in ``pg_stat_activity``.

    Django's pool (``OPTIONS["pool"]``) is for the job threads (docs/worker.md, "Connections"):
    the worker's own connections stay its own, and a LISTEN must stay on its connection. Used
    from the thread that created it only.
    """
    wrapper = connections.create_connection(alias)
    options = {k: v for k, v in wrapper.settings_dict.get("OPTIONS", {}).items() if k != "pool"}
    wrapper.settings_dict = {
        **wrapper.settings_dict,
        "OPTIONS": {**options, "application_name": application_name[:63]},
    }
    return wrapper


@contextmanager
def own_django_connection(alias: str, application_name: str) -> Iterator[None]:
    """Within the block, this thread's Django connection to ``alias`` (``connections[alias]``,
    what the ORM uses) is one of its own, never from the pool; closed at the end, and the
    thread's previous one put back.

    For the ORM the worker loop runs itself (the schedules' sync): a loop that took a pooled
    connection would wait, without heartbeats or timeouts, while jobs hold them all.
    """
    previous = connections[alias]
    wrapper = unpooled_wrapper(alias, application_name)
    connections[alias] = wrapper
    try:
        yield
    finally:
        connections[alias] = previous
        try:
            wrapper.close()
        except Exception:
            logger.debug("Error closing a connection of the worker's own", exc_info=True)


class QueueConnection:
    """A lazily (re)opened autocommit connection to the queue database.

    An :class:`operations.Database <django_pgqueue.operations.db.Database>`: every operation the
    worker makes is one statement, so in autocommit each statement is its own transaction.
    """

    def __init__(self, alias: str, application_name: str) -> None:
        self.alias = alias
        self.application_name = application_name
        self._wrapper: Any = None
        self.prepare = settings.PREPARED_STATEMENTS

    @property
    def raw(self) -> psycopg.Connection[Any]:
        if (
            self._wrapper is None
            or self._wrapper.connection is None
            or self._wrapper.connection.closed
        ):
            self._open()
        return self._wrapper.connection  # type: ignore[no-any-return]

    def _open(self) -> None:
        self.close()
        wrapper = unpooled_wrapper(self.alias, self.application_name)
        wrapper.ensure_connection()
        wrapper.connection.autocommit = True
        if self.prepare and behind_a_pooler(wrapper.connection):
            self.prepare = False
            logger.warning(
                "%s: connected through a connection pooler; prepared statements off (in "
                "transaction mode a pooler may run a statement on a server connection where "
                "it was never prepared, or where another client prepared another under the "
                "same name). Set PGQUEUE_PREPARED_STATEMENTS = False to skip this check.",
                self.application_name,
            )
        # Django turns psycopg's automatic prepared statements off; the worker repeats the
        # same few statements thousands of times: prepare each from its second execution, so
        # the claim is planned once per connection instead of on every call.
        wrapper.connection.prepare_threshold = 1 if self.prepare else None
        # Every worker statement finds its rows through an index (by primary key, or the ready
        # ring's), in the index's order. A prepared statement keeps the plan made on its first
        # executions, and on a job table still small then, a sequential scan is cheapest: kept,
        # it reads the whole table, grown since, on every call. The ring's slots are truncated
        # and refilled all the time, so their statistics are never right: estimating a slot
        # nearly empty, the planner reads every ready row of the queue by bitmap and sorts
        # them, on every claim (a 15,000-job backlog: 123 us of PostgreSQL CPU per job instead
        # of 45). Other scans are still possible, just never preferred: a plan that needs one
        # (a table without a usable index, like the worker table's pruning, or the ring's
        # recycling) costs 1e10 more, far above jit_above_cost, so the server would compile
        # each such statement with LLVM, 70 ms of CPU for a DELETE of no rows. The worker's
        # statements are all short: JIT never pays for itself here.
        # A prepared statement is planned for its parameters (a custom plan) on its first five
        # executions before PostgreSQL may settle on one plan for all: the claim, with the ring's
        # eight partitions, takes 3 ms to plan (0.13 ms to run a one-job claim), so each new
        # connection paid 15 ms for plans it would not keep, and a statement whose custom plans
        # looked cheaper would be planned on every call. Its parameters (queue names, a limit,
        # ids) never change which index to read.
        wrapper.connection.execute(SET_WORKER_SESSION)
        use_native_timestamps(wrapper)
        self._wrapper = wrapper

    @contextmanager
    def cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        # Server-side binding, not Django's ClientCursor: only those can be prepared. Each
        # statement's placeholders are converted once (NativeCursor).
        with NativeCursor(self.raw) as cursor:
            yield cursor

    def stop_preparing(self, exc: BaseException) -> bool:
        """After ``exc``, turn prepared statements off if it says they don't work here.

        A pooler in transaction mode (PgBouncer before 1.21, or without
        ``max_prepared_statements``) hands each statement to any server connection, where the
        statement prepared on another is missing. Returns True if they were on (and now off).
        """
        if not (self.prepare and isinstance(exc, PREPARED_STATEMENT_ERRORS)):
            return False
        self.prepare = False
        logger.warning(
            "Prepared statements fail on this connection (%s): a pooler in transaction mode? "
            "Turning them off for this worker; set PGQUEUE_PREPARED_STATEMENTS = False to "
            "start without them.",
            str(exc).strip(),
        )
        self.close()
        return True

    def atomic(self) -> AbstractContextManager[Any]:
        return nullcontext()

    def transaction(self) -> AbstractContextManager[Any]:
        """BEGIN ... COMMIT (ROLLBACK on an exception) on this autocommit connection."""
        return self.raw.transaction()

    def after_commit(self, func: Callable[[], None]) -> None:
        """At once: the worker calls this only after its one-statement (autocommit)
        operations, never inside :meth:`transaction`."""
        try:
            func()
        except Exception:
            logger.warning("After-commit call %r failed", func, exc_info=True)

    def close(self) -> None:
        wrapper, self._wrapper = self._wrapper, None
        if wrapper is not None:
            try:
                wrapper.close()
            except Exception:
                logger.debug("Error closing the queue connection", exc_info=True)
                # Django refuses to close a wrapper from a thread other than the one that
                # opened it; the psycopg connection under it closes from any thread.
                with suppress(Exception):
                    if wrapper.connection is not None:
                        wrapper.connection.close()


class Backoff:
    """Exponential reconnect delays: 0.1 s doubling to ``cap``; reset after a success."""

    def __init__(self, cap: float = 10.0) -> None:
        self.cap = cap
        self.delay = 0.0
        self._failing_since: float | None = None

    def failed(self) -> float:
        if self._failing_since is None:
            self._failing_since = time.monotonic()
        self.delay = min(self.cap, max(0.1, self.delay * 2))
        return self.delay

    def succeeded(self) -> float | None:
        """Reset; returns how long the failures lasted (seconds), or None if there were none."""
        since, self._failing_since = self._failing_since, None
        self.delay = 0.0
        return None if since is None else time.monotonic() - since

    def sleep(self, stop: Any = None) -> None:
        delay = self.failed()
        if stop is not None:
            stop.wait(delay)
        else:
            time.sleep(delay)


def log_database_error(worker_id: str, exc: BaseException, delay: float) -> None:
    """The loop lost its connection (a warning) or the database refused a statement (with the
    traceback); it retries in ``delay`` seconds."""
    if isinstance(exc, CONNECTION_ERRORS):
        logger.warning(
            "Worker %s: queue database unreachable (%s); retrying in %.1fs",
            worker_id,
            str(exc).strip(),
            delay,
        )
    else:
        logger.exception("Worker %s: queue database error; retrying in %.1fs", worker_id, delay)


def log_database_back(worker_id: str, outage: float | None) -> None:
    """After a statement succeeded: say so if it ended an outage of ``outage`` seconds."""
    if outage is not None:
        logger.info("Worker %s: queue database back after %.1fs; carrying on", worker_id, outage)
