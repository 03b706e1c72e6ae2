"""The ``pgqueue_schedule`` table: one row per periodic schedule.

A schedule made by ``@job(cron=...)`` has ``source = "code"`` and keeps what the code declares
in ``code``, apart from the values in use: an admin edit changes the values, a later sync
changes only ``code``, so the admin can say "edited: differs from code" and offer "reset to
code". Exported as :class:`django_pgqueue.models.Schedule`.
"""

from __future__ import annotations

import inspect
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone as django_timezone

from django_pgqueue.fields import default_zone
from django_pgqueue.states import PRIORITY_MAX, PRIORITY_MIN

if TYPE_CHECKING:
    from django_pgqueue.models import Job
    from django_pgqueue.schedules.timing import Timing


class Source(models.TextChoices):
    CODE = "code", "Code"
    ADMIN = "admin", "Admin"


#: The values a code declaration sets; compared with the row's to tell an admin edit.
CODE_FIELDS = (
    "job",
    "cron",
    "every",
    "timezone",
    "args",
    "kwargs",
    "queue",
    "priority",
    "catch_up",
)
#: Fields whose change moves ``next_run_at``.
TIMING_FIELDS = ("cron", "every", "timezone", "enabled")


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def enable(self) -> int:
        """Enable the disabled ones; each next runs at its first tick from now (a disabled
        stretch is not "missed")."""
        count = 0
        for schedule in self.filter(enabled=False):
            schedule.enabled = True
            schedule.reschedule()
            schedule.save(update_fields=["enabled", "next_run_at", "updated_at"])
            count += 1
        return count

    def disable(self) -> int:
        return self.filter(enabled=True).update(
            enabled=False, next_run_at=None, updated_at=django_timezone.now()
        )


class Schedule(models.Model):
    name = models.CharField(max_length=255, unique=True)
    job = models.CharField(max_length=255, help_text="Registered name of the job it enqueues.")
    cron = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="Cron expression: minute hour day month weekday, with an optional leading "
        "seconds field. Leave empty to use an interval.",
    )
    every = models.FloatField(
        null=True, blank=True, help_text="Seconds between runs (instead of a cron expression)."
    )
    timezone = models.CharField(
        max_length=64,
        default=default_zone,
        help_text="IANA time zone the cron expression is read in (e.g. Europe/Paris).",
    )
    args = models.JSONField(default=list, blank=True, help_text="Positional arguments (JSON).")
    kwargs = models.JSONField(default=dict, blank=True, help_text="Keyword arguments (JSON).")
    queue = models.CharField(
        max_length=100, null=True, blank=True, help_text="Empty: the job's own queue."
    )
    priority = models.SmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(PRIORITY_MIN), MaxValueValidator(PRIORITY_MAX)],
        help_text="From -100 to 100; empty: the job's own priority.",
    )
    catch_up = models.BooleanField(
        default=False,
        help_text="After an outage, enqueue every missed run (at most 100) instead of only "
        "the latest one.",
    )
    enabled = models.BooleanField(default=True)
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_run_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="The last tick a worker enqueued."
    )
    source = models.CharField(
        max_length=8, choices=Source.choices, default=Source.ADMIN, editable=False
    )
    code = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="What the code declares (code schedules), kept apart from the values in use.",
    )
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        db_table = "pgqueue_schedule"
        ordering = ["name"]
        indexes = [
            models.Index(
                fields=["next_run_at"], name="pgqueue_sched_due", condition=Q(enabled=True)
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=(Q(cron="") & Q(every__gte=1)) | (~Q(cron="") & Q(every__isnull=True)),
                name="pgqueue_schedule_cron_or_every",
            ),
            models.CheckConstraint(
                condition=Q(priority__isnull=True)
                | Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX),
                name="pgqueue_schedule_priority_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.enabled:
            self.next_run_at = None
        elif self.next_run_at is None:
            self.reschedule()
        super().save(*args, **kwargs)

    # ----- timing ----------------------------------------------------------------------------

    def timing(self) -> Timing:
        """Raises ValueError if the row's cron, interval or zone is invalid."""
        from django_pgqueue.schedules.timing import Timing

        return Timing(self.cron, self.every, self.timezone)

    def reschedule(self, now: datetime | None = None) -> None:
        """Set ``next_run_at`` to the first tick after ``now`` (None when disabled)."""
        if not self.enabled:
            self.next_run_at = None
            return
        self.next_run_at = self.timing().next_after(now or django_timezone.now())

    def upcoming(self, count: int = 5, now: datetime | None = None) -> list[datetime]:
        return self.timing().upcoming(now or django_timezone.now(), count)

    def describe(self) -> str:
        try:
            return self.timing().describe()
        except ValueError as exc:
            return f"invalid: {exc}"

    # ----- code and admin --------------------------------------------------------------------

    def values(self) -> dict[str, Any]:
        """The values in use that a code declaration sets."""
        return {name: getattr(self, name) for name in CODE_FIELDS}

    @property
    def code_values(self) -> dict[str, Any] | None:
        return None if not self.code else dict(self.code["values"])

    @property
    def removed_from_code(self) -> bool:
        code = self.code or {}
        return self.source == Source.CODE and bool(code.get("removed"))

    def differences(self) -> list[str]:
        """The fields an admin edit made differ from the code's values (code schedules)."""
        declared = self.code_values
        if self.source != Source.CODE or declared is None:
            return []
        return [name for name in CODE_FIELDS if declared.get(name) != getattr(self, name)]

    @property
    def edited(self) -> bool:
        return bool(self.differences())

    def apply_code(self) -> None:
        """Take the code's values (a sync of an unedited schedule, or "reset to code")."""
        declared = self.code_values
        if declared is None:
            raise ValueError(f"schedule {self.name!r} has no code values")
        timing_before = (self.cron, self.every, self.timezone)
        for name in CODE_FIELDS:
            setattr(self, name, declared[name])
        if (self.cron, self.every, self.timezone) != timing_before or self.next_run_at is None:
            self.reschedule()

    def problem(self) -> str | None:
        """Why this schedule is broken (its job is not registered, its timing or arguments
        are invalid), or None."""
        from django_pgqueue import registry
        from django_pgqueue.arguments import serialize_arguments
        from django_pgqueue.exceptions import InvalidJobArguments

        try:
            self.timing()
        except ValueError as exc:
            return str(exc)
        if self.job not in registry.names():
            return f"job {self.job!r} is not registered (no @job of that name in this code)"
        try:
            signature = inspect.signature(registry.get(self.job).func)
            serialize_arguments(self.job, self.args, self.kwargs, signature)
        except (InvalidJobArguments, TypeError, ValueError) as exc:
            return f"arguments do not fit the job: {exc}"
        if self.enabled and self.next_run_at is None:
            return "enabled, but no next run could be computed (see the worker's log)"
        return None

    def clean(self) -> None:
        from django_pgqueue import registry
        from django_pgqueue.arguments import serialize_arguments
        from django_pgqueue.exceptions import InvalidJobArguments

        errors: dict[str, str] = {}
        if bool(self.cron) == (self.every is not None):
            errors["cron"] = "Give either a cron expression or an interval (every), not both."
        else:
            try:
                self.timing()
            except ValueError as exc:
                errors["every" if self.every is not None else "cron"] = str(exc)
        if self.job not in registry.names():
            errors["job"] = f"No job named {self.job!r} is registered."
        elif not isinstance(self.args, list):
            errors["args"] = "Positional arguments must be a JSON list."
        elif not isinstance(self.kwargs, dict):
            errors["kwargs"] = "Keyword arguments must be a JSON object."
        else:
            try:
                signature = inspect.signature(registry.get(self.job).func)
                serialize_arguments(self.job, self.args, self.kwargs, signature)
            except InvalidJobArguments as exc:
                errors["args"] = str(exc)
        if errors:
            raise ValidationError(errors)

    def run_now(self) -> Job:
        """Enqueue one run now, without moving the schedule."""
        from django_pgqueue import operations
        from django_pgqueue.conf import settings

        return operations.run_schedule_now(operations.DjangoDatabase(settings.DATABASE), self)
