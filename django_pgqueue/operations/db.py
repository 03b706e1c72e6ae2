"""The connection an operation runs on, and the database errors the queue tells apart.

Operations take a :class:`Database`: :class:`DjangoDatabase` for the ORM side (the caller's
connection and transaction, so an enqueue commits with the caller's rows), or the worker's own
:class:`~django_pgqueue.worker.connection.QueueConnection`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import django.db
import psycopg
import psycopg.errors
from django.db import connections, transaction

from django_pgqueue.sql import Cursor

#: Any error raised by the database or the driver, wrapped by Django or not.
DATABASE_ERRORS: tuple[type[Exception], ...] = (psycopg.Error, django.db.Error)

#: Errors that mean "the connection is gone or unusable": reconnect and carry on. Django wraps
#: psycopg's errors in its own classes (``django.db.OperationalError``...), so both kinds.
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    django.db.OperationalError,
    django.db.InterfaceError,
)

#: A unique index refused a row, through Django's cursor or psycopg's.
UNIQUE_VIOLATIONS: tuple[type[Exception], ...] = (
    psycopg.errors.UniqueViolation,
    django.db.IntegrityError,
)


class Database(Protocol):
    """A connection to the queue database, as the operations use it."""

    @property
    def alias(self) -> str: ...

    def cursor(self) -> AbstractContextManager[Cursor]: ...

    def atomic(self) -> AbstractContextManager[Any]:
        """A transaction (or a savepoint inside one) around several statements."""

    def transaction(self) -> AbstractContextManager[Any]:
        """A real transaction, also on the worker's autocommit connection (whose ``atomic``
        adds nothing to its one-statement operations): row locks kept until it ends."""

    def after_commit(self, func: Callable[[], None]) -> None:
        """Call ``func`` once the current transaction has committed (at once outside one);
        never if it rolls back. An error it raises is logged, not raised."""


class DjangoDatabase:
    """A Django connection alias: the caller's connection, transaction and savepoints."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def cursor(self) -> AbstractContextManager[Cursor]:
        return connections[self.alias].cursor()

    def atomic(self) -> AbstractContextManager[Any]:
        return transaction.atomic(using=self.alias)

    def transaction(self) -> AbstractContextManager[Any]:
        return transaction.atomic(using=self.alias)

    def after_commit(self, func: Callable[[], None]) -> None:
        transaction.on_commit(func, using=self.alias, robust=True)


def psycopg_cursor(cursor: Cursor) -> psycopg.Cursor[Any]:
    """The psycopg cursor under Django's cursor wrapper (for COPY, which Django doesn't wrap)."""
    raw = getattr(cursor, "cursor", cursor)
    assert isinstance(raw, psycopg.Cursor)
    return raw
