"""System checks. Each id is listed in ``docs/settings.md``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, register

from django_pgqueue.conf import DEFAULTS, PREFIX, settings

# name -> (accepted types, minimum or None, whether the minimum itself is allowed)
_NUMBERS: dict[str, tuple[tuple[type, ...], float, bool]] = {
    "MAX_ATTEMPTS": ((int,), 1, True),
    "BACKOFF_BASE": ((int, float, timedelta), 0, True),
    "BACKOFF_MAX": ((int, float, timedelta), 0, True),
    "BACKOFF_JITTER": ((int, float), 0, True),
    "VISIBILITY_TIMEOUT": ((int, float, timedelta), 0, False),
    "HEARTBEAT_INTERVAL": ((int, float, timedelta, type(None)), 0, False),
    "RETENTION": ((int, float, timedelta), 0, True),
    "DEAD_RETENTION": ((int, float, timedelta, type(None)), 0, True),
    "PRUNE_BATCH_SIZE": ((int,), 1, True),
    "PRUNE_INTERVAL": ((int, float, timedelta), 0, False),
    "POLL_INTERVAL": ((int, float, timedelta), 0, False),
    "BATCH_SIZE": ((int,), 1, True),
    "FLUSH_SIZE": ((int,), 1, True),
    "FLUSH_INTERVAL": ((int, float, timedelta), 0, True),
    "SHUTDOWN_TIMEOUT": ((int, float, timedelta), 0, True),
    "JOB_TIMEOUT": ((int, float, timedelta, type(None)), 0, False),
}
_STRINGS = ("DATABASE", "DEFAULT_QUEUE")
_BOOLEANS = ("LISTEN", "PREPARED_STATEMENTS")


def _as_number(value: Any) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@register("django_pgqueue")
def check_database(**kwargs: Any) -> list[CheckMessage]:
    alias = settings.get("DATABASE")
    if not isinstance(alias, str) or alias not in django_settings.DATABASES:
        return [
            Error(
                f"PGQUEUE_DATABASE is {alias!r}, which is not a key of DATABASES.",
                hint="Set PGQUEUE_DATABASE to the alias of the PostgreSQL database for jobs.",
                id="django_pgqueue.E002",
            )
        ]
    engine = django_settings.DATABASES[alias].get("ENGINE", "")
    if engine != "django.db.backends.postgresql" and "postgres" not in engine:
        return [
            Error(
                f"The job queue's database {alias!r} uses {engine!r}; django_pgqueue needs "
                "PostgreSQL (it is built on SELECT ... FOR UPDATE SKIP LOCKED).",
                hint="Point PGQUEUE_DATABASE at a database using django.db.backends.postgresql.",
                id="django_pgqueue.E001",
            )
        ]
    return []


@register("django_pgqueue")
def check_settings(**kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name in DEFAULTS:
        if not hasattr(django_settings, PREFIX + name):
            continue
        value = getattr(django_settings, PREFIX + name)
        problem = _problem(name, value)
        if problem:
            errors.append(
                Error(
                    f"{PREFIX}{name} = {value!r} is invalid: {problem}.",
                    hint=f"See the settings reference in docs/settings.md (default: "
                    f"{DEFAULTS[name]!r}).",
                    id="django_pgqueue.E003",
                )
            )
    if not errors and settings.HEARTBEAT_INTERVAL >= settings.VISIBILITY_TIMEOUT:
        errors.append(
            Error(
                f"PGQUEUE_HEARTBEAT_INTERVAL ({settings.HEARTBEAT_INTERVAL}s) must be shorter "
                f"than PGQUEUE_VISIBILITY_TIMEOUT ({settings.VISIBILITY_TIMEOUT}s), or running "
                "jobs would be reclaimed while their worker is alive.",
                hint="Leave PGQUEUE_HEARTBEAT_INTERVAL unset (a quarter of the timeout).",
                id="django_pgqueue.E004",
            )
        )
    return errors


def _problem(name: str, value: Any) -> str | None:
    if name in _STRINGS:
        if not isinstance(value, str) or not value:
            return "expected a non-empty string"
        if name == "DEFAULT_QUEUE" and len(value) > 100:
            return "queue names are at most 100 characters"
        return None
    if name in _BOOLEANS:
        return None if isinstance(value, bool) else "expected True or False"
    types, minimum, inclusive = _NUMBERS[name]
    if isinstance(value, bool) or not isinstance(value, types):
        names = ", ".join("None" if t is type(None) else t.__name__ for t in types)
        return f"expected one of: {names}"
    if value is None:
        return None
    number = _as_number(value)
    if number < minimum or (not inclusive and number == minimum):
        return f"must be {'at least' if inclusive else 'greater than'} {minimum}"
    return None
