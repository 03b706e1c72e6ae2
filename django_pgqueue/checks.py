"""System checks. Each id is listed in ``docs/settings.md``."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

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


@register("django_pgqueue", Tags.database)
def check_schedules(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Enabled schedules that cannot run as they are: their job is not registered in this code,
    or their timing or arguments are invalid. Reads the table, so it runs with ``check
    --database <alias>``, ``migrate`` and ``run_jobs`` (not a plain ``check``)."""
    from django_pgqueue.models import Schedule

    alias = settings.DATABASE
    if not databases or alias not in databases:
        return []
    try:
        schedules = list(Schedule.objects.using(alias).filter(enabled=True)[:1000])
    except Exception:  # a check must not crash the command it runs in
        return []  # not migrated yet, unreachable, no database access here: others say so
    warnings: list[CheckMessage] = []
    for schedule in schedules:
        problem = schedule.problem()
        if problem:
            warnings.append(
                Warning(
                    f"Schedule {schedule.name!r} is broken: {problem}.",
                    hint="Register the job (a @job in a 'jobs' module), fix the schedule in the "
                    "admin (Job queue > Schedules), or disable it.",
                    obj=schedule,
                    id="django_pgqueue.W001",
                )
            )
    return warnings
