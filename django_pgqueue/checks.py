"""System checks. Each id is listed in ``docs/settings.md``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from django_pgqueue import rules
from django_pgqueue.conf import DEFAULTS, PREFIX, settings

if TYPE_CHECKING:
    from django_pgqueue.operations import Violation


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
    return _check_routing(alias)


def _check_routing(alias: str) -> list[CheckMessage]:
    """The database routers must send the queue's models where the queue's own code goes
    (``PGQUEUE_DATABASE``): Django's admin saves and deletes, ``Model.save()`` and ``migrate``
    follow the routers, and would write schedules or tables in another database."""
    from django.apps import apps
    from django.db import router

    models = list(apps.get_app_config("django_pgqueue").get_models())
    routed = {router.db_for_read(model) for model in models}
    routed |= {router.db_for_write(model) for model in models}
    elsewhere = sorted(routed - {alias})
    if not elsewhere:
        return []
    return [
        Error(
            f"PGQUEUE_DATABASE is {alias!r}, but DATABASE_ROUTERS send the queue's models to "
            f"{', '.join(map(repr, elsewhere))}: the admin and migrate would use that database.",
            hint='Add "django_pgqueue.routers.QueueRouter" to DATABASE_ROUTERS (first), see '
            "docs/settings.md#a-dedicated-queue-database.",
            id="django_pgqueue.E005",
        )
    ]


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


@register("django_pgqueue")
def check_pools(**kwargs: Any) -> list[CheckMessage]:
    """A connection pool (``OPTIONS["pool"]``) that would fail at its first connection: in a
    worker, in every job that queries its database (docs/worker.md, "Connections")."""
    from django_pgqueue import pools

    errors: list[CheckMessage] = []
    for alias in pools.pooled_aliases():
        problem = pools.problem(django_settings.DATABASES[alias])
        if problem:
            errors.append(
                Error(
                    f"DATABASES[{alias!r}] has a connection pool that cannot open: {problem}. "
                    "Every job that queries it would fail.",
                    hint="For example OPTIONS['pool'] = {'min_size': 2, 'max_size': 4} with "
                    "CONN_MAX_AGE = 0, and the pool extra installed; see the Connections "
                    "section of docs/worker.md.",
                    id="django_pgqueue.E020",
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


#: The storage's invariants (docs/storage.md), each with its check id.
STORAGE_CHECKS = {
    "stranded": (
        "django_pgqueue.E101",
        "pending jobs have no ready row: no claim can reach them (S1)",
    ),
    "duplicated": ("django_pgqueue.E102", "jobs have more than one ready row (S1)"),
    "disagreeing": (
        "django_pgqueue.E103",
        "ready rows disagree with their pending job's queue, priority, run_after, keys, "
        "limit or kind (S2)",
    ),
    "orphaned": (
        "django_pgqueue.E104",
        "ready rows belong to jobs that are gone or not pending (S3)",
    ),
    "misshapen_windows": (
        "django_pgqueue.E105",
        "rate windows hold more entries than their bound, or counts that do not match them (S7)",
    ),
    "unvalidated": (
        "django_pgqueue.E106",
        "CHECK constraints were added NOT VALID and never validated: rows written before them "
        "may break them (S9, S11, the status CHECK); or an index of the job table is invalid: "
        "its concurrent build failed (or is under way), it enforces nothing",
    ),
    "miscounted_parents": (
        "django_pgqueue.E107",
        "jobs' count of parents not completed disagrees with their parents (F1)",
    ),
    "stuck_waiting": (
        "django_pgqueue.E108",
        "waiting jobs have no parent left to wait for, or wait for one that ended dead, "
        "cancelled or is gone: nothing will release them (F2)",
    ),
    "unmarked_parents": (
        "django_pgqueue.E109",
        "jobs with dependents are not marked so: their end would not reach them (F3)",
    ),
    "miscounted_batches": (
        "django_pgqueue.E110",
        "batches' counts of active members disagree with their members (B1)",
    ),
    "deaf_listeners": (
        "django_pgqueue.W111",
        "worker rows say listening while no listening connection of theirs is open: enqueue() "
        "may pick them to wake, and the job then waits for a poll (S12)",
    ),
}

#: The kinds reported as warnings: not a job's rows, and corrected without a repair.
WARNING_KINDS = frozenset({"deaf_listeners"})


#: What to do about a rate window the queue did not write (nothing derives it again).
WINDOW_HINT = (
    "Delete the window's row from pgqueue_rate_window: the next enqueue of its jobs (or "
    "limit_queue) defines it again, without the starts it counted (see docs/storage.md)."
)

#: What to do about a constraint a migration added but did not get to validate.
UNVALIDATED_HINT = (
    "Validate each: ALTER TABLE <table> VALIDATE CONSTRAINT <name> (it reads the table under "
    "a lock that lets reads and writes go on; a row it rejects stops it, named in the error). "
    "An invalid index: run migrate again (the migration that builds it drops it and builds it "
    "again). See docs/storage.md."
)

#: What to do about worker rows that say listening with their connection gone.
DEAF_HINT = (
    "Nothing, as a rule: any worker's reading of the rota (every 2 s or so) clears them. With "
    "no worker running they do no harm; a worker that starts corrects them (see "
    "docs/storage.md, S12)."
)

#: What to do about workflows' counts that disagree with the jobs.
WORKFLOW_HINT = (
    "`manage.py pgqueue_repair` counts them again from the jobs and their edges, releases or "
    "cancels the waiting jobs that should be, and finishes the batches that should be "
    "(see docs/storage.md, F1-F3 and B1)."
)

#: The hint of each kind of violation the workers do not repair.
HINTS = {
    "misshapen_windows": WINDOW_HINT,
    "unvalidated": UNVALIDATED_HINT,
    "deaf_listeners": DEAF_HINT,
    "miscounted_parents": WORKFLOW_HINT,
    "stuck_waiting": WORKFLOW_HINT,
    "unmarked_parents": WORKFLOW_HINT,
    "miscounted_batches": WORKFLOW_HINT,
}

#: Commands whose database checks leave the storage's out: they must not wait for a read of
#: the side tables (a worker's start, a migration, however many jobs wait), and an error would
#: stop them, when a worker repairs what the check finds by itself (docs/storage.md).
SKIP_STORAGE_CHECK = frozenset({"migrate", "run_jobs"})


def _running_command() -> str | None:
    """The name of the management command these checks run in, if any (Django passes checks
    nothing that says)."""
    from django.core.management.base import BaseCommand

    frame = sys._getframe(1)
    while frame is not None:
        command = frame.f_locals.get("self")
        if isinstance(command, BaseCommand):
            return type(command).__module__.rpartition(".")[2]
        frame = frame.f_back  # type: ignore[assignment]
    return None


def describe(violation: Violation) -> tuple[str, str]:
    """A violation's check id, and what it says: how many, what is wrong, the first ids."""
    check_id, what = STORAGE_CHECKS[violation.kind]
    ids = ", ".join(f"#{i}" if isinstance(i, int) else i for i in violation.first_ids)
    more = violation.count - len(violation.first_ids)
    return check_id, f"{violation.count} {what}: {ids}{f' and {more} more' if more > 0 else ''}"


@register("django_pgqueue", Tags.database)
def check_storage(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The storage's invariants (docs/storage.md), read in one snapshot: each violated one is
    an error naming the first jobs. Runs with ``check --database <alias>``, not in ``migrate``
    or ``run_jobs`` (:data:`SKIP_STORAGE_CHECK`); says nothing on a database not migrated (up
    to ``0012``) yet."""
    from django_pgqueue import operations

    alias = settings.DATABASE
    if not databases or alias not in databases or _running_command() in SKIP_STORAGE_CHECK:
        return []
    db = operations.DjangoDatabase(alias)
    try:
        with db.atomic():  # a failed query must not break the caller's transaction
            if not operations.storage_ready(db):
                return []
            found = operations.violations(db)
    except Exception:  # a check must not crash the command it runs in
        return []  # unreachable, no database access here, half-migrated: others say so
    errors: list[CheckMessage] = []
    for violation in found:
        check_id, message = describe(violation)
        kind = Warning if violation.kind in WARNING_KINDS else Error
        errors.append(
            kind(
                f"{message}.",
                hint=HINTS.get(
                    violation.kind,
                    "Workers repair this within PGQUEUE_REPAIR_INTERVAL; "
                    "`manage.py pgqueue_repair` does it now (see docs/storage.md).",
                ),
                id=check_id,
            )
        )
    return errors
