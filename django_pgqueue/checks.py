"""System checks. Each id is listed in ``docs/settings.md``."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, register

from django_pgqueue import rules
from django_pgqueue.conf import DEFAULTS, PREFIX, settings


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
    for name in DEFAULTS:  # every problem at once, not one per run
        value = settings.get(name)
        rule = rules.SETTINGS[name]
        problem = rule.problem(value)
        if problem:
            errors.append(
                Error(
                    f"{PREFIX}{name} = {value!r} is invalid: it {problem}.",
                    hint=f"Expected {rule.describe()} (default: {DEFAULTS[name]!r}); see the "
                    "settings reference in docs/settings.md.",
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
