"""Field classes and field defaults: the only part of the package migrations may import.

Migrations are history: each names these by their dotted path forever, so they keep their
names and their behaviour here, and this module imports nothing else of the package
(``tests/test_migrations_frozen.py`` keeps the migrations to Django and this module).

:class:`TolerantJSONField` reads any jsonb PostgreSQL holds, including what Python's json
can't take: jsonb accepts integers of thousands of digits and nesting far deeper than Python's
recursion limit; ``json.loads`` refuses both. A row like that (written by hand, by another
program, or by an older version) must not make every page and query that loads it fail: the
value is read as :class:`UndecodableJSON`, a ``str`` of the raw JSON text, which the admin
shows as it is and the worker fails as a poison job (it decodes rows itself, see
``operations.claim``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class UndecodableJSON(str):
    """The raw text of a jsonb value Python's json module cannot decode."""

    __slots__ = ()


class TolerantJSONField(models.JSONField):
    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        try:
            return super().from_db_value(value, expression, connection)
        except (ValueError, RecursionError):
            return UndecodableJSON(value)

    def deconstruct(self) -> Any:
        # Migrations see a plain JSONField: reading is all that differs, not the column.
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


class TimestampArrayField(models.Field):  # type: ignore[type-arg]
    """A ``timestamptz[]`` column (psycopg reads it as a list of datetimes), without requiring
    ``django.contrib.postgres`` in ``INSTALLED_APPS``. Only the queue's SQL writes it."""

    description = "A PostgreSQL array of timestamps with time zone"

    def db_type(self, connection: Any) -> str:
        return "timestamp with time zone[]"


class IntegerArrayField(models.Field):  # type: ignore[type-arg]
    """An ``integer[]`` column, like :class:`TimestampArrayField`. Only the queue's SQL writes
    it."""

    description = "A PostgreSQL array of integers"

    def db_type(self, connection: Any) -> str:
        return "integer[]"


def default_zone() -> str:
    """A new schedule's time zone: the project's ``TIME_ZONE`` (``Schedule.timezone``'s default,
    named by the migration ``0003_schedules``)."""
    return str(getattr(settings, "TIME_ZONE", None) or "UTC")
