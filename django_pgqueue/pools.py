"""Django's connection pool (``DATABASES[alias]["OPTIONS"]["pool"]``, Django 5.1+) as the worker
sees it.

A worker process runs jobs in threads, each with its own Django connections. With a pool on an
alias, those threads take a connection from the process's pool when a job first queries it and
give it back when the attempt ends (``CONN_MAX_AGE = 0``, which Django requires with a pool), so
a process holds at most the pool's ``max_size`` connections to it however many threads it runs.
The worker's own connections (claims and outcomes, LISTEN, the supervisor's) never come from the
pool: :class:`~django_pgqueue.worker.connection.QueueConnection` drops the option.

Here: what an alias's pool options say (:class:`PoolOptions`), what would make the first job
fail (:func:`problem`, the system check ``django_pgqueue.E020``), the line a worker logs when it
starts (:func:`describe`), and closing a process's pools before it forks (:func:`close_pools`).
See docs/worker.md, "Connections".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.db import connections

from django_pgqueue.printable import get_logger

logger = get_logger("django_pgqueue.worker")

#: psycopg_pool's defaults (``ConnectionPool``): 4 connections, no more, a 30 s wait for one.
DEFAULT_MIN_SIZE = 4
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class PoolOptions:
    """An alias's pool, as its settings configure it."""

    alias: str
    options: dict[str, Any]

    @property
    def min_size(self) -> int:
        return int(self.options.get("min_size", DEFAULT_MIN_SIZE))

    @property
    def max_size(self) -> int:
        """The most connections one process's pool opens (psycopg_pool: ``min_size`` unless
        set)."""
        value = self.options.get("max_size")
        return self.min_size if value is None else int(value)

    @property
    def timeout(self) -> float:
        """How long ``getconn()`` waits for a connection before ``PoolTimeout``."""
        return float(self.options.get("timeout", DEFAULT_TIMEOUT))


def pool_options(alias: str) -> PoolOptions | None:
    """The pool configured on ``alias`` (None: none, or not a PostgreSQL alias)."""
    settings_dict = django_settings.DATABASES.get(alias) or {}
    if "postgres" not in str(settings_dict.get("ENGINE", "")):
        return None
    options = (settings_dict.get("OPTIONS") or {}).get("pool")
    if not options:
        return None
    return PoolOptions(alias, {} if options is True else dict(options))


def pooled_aliases() -> list[str]:
    """The aliases of ``DATABASES`` that have a connection pool."""
    return [alias for alias in django_settings.DATABASES if pool_options(alias) is not None]


def problem(settings_dict: Mapping[str, Any]) -> str | None:
    """What would make the pool of a database (its ``DATABASES`` entry) fail at its first
    connection, so in every job that queries it; or None. Django checks these only then, in
    the job's thread."""
    options = (settings_dict.get("OPTIONS") or {}).get("pool")
    if options is not True and not isinstance(options, dict):
        return f"OPTIONS['pool'] is {options!r}: it must be True or a dict of psycopg_pool options"
    if settings_dict.get("CONN_MAX_AGE", 0) != 0:
        return (
            f"CONN_MAX_AGE is {settings_dict['CONN_MAX_AGE']!r}: Django's pool requires 0 (a "
            "connection goes back to the pool when it is closed)"
        )
    try:
        from psycopg_pool import ConnectionPool
    except ImportError:
        return "psycopg_pool is not installed (pip install 'django-pgqueue-jobs[pool]')"
    reserved = {"kwargs", "open", "configure"} & set(options if isinstance(options, dict) else ())
    if reserved:
        return f"OPTIONS['pool'] sets {', '.join(sorted(reserved))}, which Django sets itself"
    try:
        # Not opened: nothing connects, no thread starts. psycopg_pool checks its arguments.
        ConnectionPool(kwargs={}, open=False, **({} if options is True else options))
    except (TypeError, ValueError) as exc:
        return f"psycopg_pool refuses OPTIONS['pool'] = {options!r}: {exc}"
    return None


def describe(threads: int, processes: int) -> list[str]:
    """What the job threads of ``processes`` processes of ``threads`` threads hold on each
    pooled alias: the line a worker logs when it starts."""
    lines = []
    for alias in pooled_aliases():
        pool = pool_options(alias)
        assert pool is not None
        try:
            size = f"{pool.min_size}-{pool.max_size}"
            most = pool.max_size
        except (TypeError, ValueError):  # the system check says what is wrong
            continue
        if most >= threads:
            wait = "each thread gets one when its job queries the database"
        else:
            wait = (
                f"a job that finds none free waits for one up to {pool.timeout:g}s (the pool's "
                "timeout), then fails with PoolTimeout and is retried"
            )
        lines.append(
            f"the {threads} job thread(s) of each process share a pool of {size} connections "
            f"to {alias!r} (at most {most * processes} for {processes} process(es)): {wait}"
        )
    return lines


def close_pools() -> None:
    """Close this process's Django connections and its connection pools: before a fork.

    A pool does not survive a fork: a child handed its parent's open pool would share the
    parent's server connections, and wait forever for the connections it grows by, which the
    parent's threads (not copied) were to open. A pool is made again at its first use (in the
    child, its own).
    """
    connections.close_all()
    for alias in pooled_aliases():
        close_pool = getattr(connections[alias], "close_pool", None)
        if close_pool is None:  # Django before 5.1: no pools
            continue
        try:
            close_pool()
        except Exception:  # a misconfigured pool (E020) was never opened
            logger.debug("Could not close the connection pool of %r", alias, exc_info=True)
