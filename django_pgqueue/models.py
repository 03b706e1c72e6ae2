"""The app's tables: the jobs, the workers, the queues' settings and rate windows, and the
periodic schedules.

One row per job. The hot path (enqueue, claim, complete) only ever touches the small partial
indexes below, so the claim stays as fast with a million rows of history as with none.
"""

from __future__ import annotations

import inspect
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils import timezone as django_timezone  # Schedule.timezone hides the module

from django_pgqueue.fields import (
    IntegerArrayField,
    TimestampArrayField,
    TolerantJSONField,
    default_zone,
)
from django_pgqueue.managers import (
    JobManager,
    JobQuerySet,
    QueueManager,
    ScheduleManager,
)
from django_pgqueue.schedules.models import CODE_FIELDS, Source
from django_pgqueue.states import (
    ACTIVE,
    FINISHED,
    PRIORITY_MAX,
    PRIORITY_MIN,
    JobStatus,
    is_retryable,
)

if TYPE_CHECKING:
    from collections.abc import Collection

    from django_pgqueue.schedules.timing import Timing


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=100, db_default="default")
    name = models.CharField(max_length=255, help_text="Registered name of the job function.")
    args = TolerantJSONField(default=list, db_default=models.Value([], models.JSONField()))
    kwargs = TolerantJSONField(default=dict, db_default=models.Value({}, models.JSONField()))
    status = models.CharField(
        max_length=16,
        choices=JobStatus.choices,
        default=JobStatus.PENDING,
        db_default=JobStatus.PENDING.value,
    )
    priority = models.SmallIntegerField(
        default=0, db_default=0, help_text="From -100 to 100; higher runs first."
    )
    run_after = models.DateTimeField(
        default=timezone.now, db_default=Now(), help_text="Not claimed before this time."
    )
    attempts = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Claims so far, including the running one."
    )
    max_attempts = models.PositiveIntegerField(default=5, db_default=5)
    interruptions = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Times a worker's shutdown handed it back (docs/worker.md); within "
        "PGQUEUE_MAX_INTERRUPTIONS they spend no attempt.",
    )
    locked_at = models.DateTimeField(
        null=True, blank=True, help_text="Claim time, refreshed by the worker's heartbeat."
    )
    locked_by = models.CharField(max_length=255, null=True, blank=True)
    claim_token = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="The claim that last took it (never repeats): outcomes, heartbeats and "
        "hand-backs apply only with it.",
    )
    last_error = models.TextField(blank=True, db_default="", default="")
    errors = TolerantJSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        help_text="One entry per failed attempt (attempt, worker_id, exception_class, traceback).",
    )
    result = TolerantJSONField(null=True, blank=True, help_text="JSON return value, on success.")
    unique_key = models.CharField(max_length=255, null=True, blank=True)
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a cancellation of the running job was asked for; it ends cancelled.",
    )
    progress = TolerantJSONField(
        null=True, blank=True, help_text="What the job last reported with set_progress()."
    )
    # Limits above one and rates (docs/control.md); NULL on every unlimited job.
    concurrency_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most running jobs with this concurrency key (NULL: 1)."
    )
    concurrency_place = models.PositiveSmallIntegerField(
        default=0, db_default=0, help_text="Which of its key's concurrency_limit places it runs in."
    )
    rate_key = models.CharField(
        max_length=255, null=True, blank=True, help_text="The rate limit it counts against."
    )
    schedule = models.CharField(
        max_length=255,
        null=True,
        blank=True,
        help_text="Name of the periodic schedule that enqueued this job, if one did.",
    )
    trace_context = TolerantJSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="W3C trace context of the span that enqueued it (traceparent, tracestate); "
        "NULL outside a trace.",
    )
    is_async = models.BooleanField(
        default=False,
        db_default=False,
        editable=False,
        help_text="An async def job: run on its worker's event loop.",
    )
    # Workflows (docs/workflows.md; the rules: F1-F4 and B1 in docs/storage.md).
    parents_left = models.IntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="Of the jobs it was enqueued after, how many have not completed (NULL: it "
        "waits for none); it is waiting while this is above 0.",
    )
    dependents = models.BooleanField(
        default=False,
        db_default=False,
        editable=False,
        help_text="Jobs wait for it: its end releases or cancels them.",
    )
    batch = models.ForeignKey(
        "Batch",
        null=True,
        blank=True,
        editable=False,
        db_constraint=False,
        db_index=False,
        on_delete=models.DO_NOTHING,
        related_name="members",
        help_text="The batch it is a member of.",
    )
    callback_of = models.ForeignKey(
        "Batch",
        null=True,
        blank=True,
        editable=False,
        db_constraint=False,
        db_index=False,
        db_column="callback_of",
        on_delete=models.DO_NOTHING,
        related_name="callback_jobs",
        help_text="The batch whose end enqueued it (a callback).",
    )

    objects = JobManager()

    # Not columns: set on instances the queue hands out.
    #: ``enqueue`` with a unique key found this active job instead of inserting one.
    deduplicated: bool = False
    #: Set by the claim when the row cannot be run as stored (its attempt fails, unrun).
    poison: str | None = None

    class Meta:
        db_table = "pgqueue_job"
        ordering = ["-id"]
        indexes = [
            # Pending jobs per queue, in claim order: the dashboard's counts and the admin. The
            # claims read the ready ring instead (``sql.ready``), whose dead entries stay bounded
            # under a pinned xmin horizon.
            models.Index(
                "queue",
                models.F("priority").desc(),
                "run_after",
                "id",
                name="pgqueue_job_claim_queue",
                condition=Q(status=JobStatus.PENDING),
            ),
            # Stale-lock recovery and heartbeats: only running rows.
            models.Index(
                fields=["locked_at"],
                name="pgqueue_job_stale",
                condition=Q(status=JobStatus.RUNNING),
            ),
            # Retention pruning, dashboard history and the admin's finished filter.
            models.Index(
                fields=["finished_at"],
                name="pgqueue_job_finished",
                condition=Q(status__in=list(FINISHED)),
            ),
            # The admin's "dead jobs" view and bulk retry stay fast on big tables.
            models.Index(
                fields=["queue", "id"], name="pgqueue_job_dead", condition=Q(status=JobStatus.DEAD)
            ),
            # A schedule's jobs (the admin's link and filter), newest first.
            models.Index(
                fields=["schedule", "id"],
                name="pgqueue_job_schedule",
                condition=Q(schedule__isnull=False),
            ),
            # Jobs waiting for others, per queue: the status counts, the check, the admin.
            models.Index(
                fields=["queue", "id"],
                name="pgqueue_job_waiting",
                condition=Q(status=JobStatus.WAITING),
            ),
            # A batch's members: its counts, its page, its seal.
            models.Index(
                fields=["batch", "id"], name="pgqueue_job_batch", condition=Q(batch__isnull=False)
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                "queue",
                "unique_key",
                name="pgqueue_job_unique_active",
                condition=Q(unique_key__isnull=False, status__in=list(ACTIVE)),
            ),
            # One running job per key and place: concurrency_limit places per key (1 by default,
            # the plain claim's only place, 0).
            models.UniqueConstraint(
                "concurrency_key",
                "concurrency_place",
                name="pgqueue_job_running_per_key_place",
                condition=Q(concurrency_key__isnull=False, status=JobStatus.RUNNING),
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX),
                name="pgqueue_job_priority_range",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in JobStatus]),
                name="pgqueue_job_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="pgqueue_job_max_attempts"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name}#{self.pk} ({self.status})"

    # ----- derived values -------------------------------------------------------------------

    @property
    def is_runnable(self) -> bool:
        return self.status == JobStatus.PENDING and self.run_after <= timezone.now()

    @property
    def is_pending(self) -> bool:
        return self.status == JobStatus.PENDING

    @property
    def is_scheduled(self) -> bool:
        """Pending, waiting for its ``run_after``."""
        return self.status == JobStatus.PENDING and self.run_after > timezone.now()

    @property
    def is_waiting(self) -> bool:
        """Waiting for the jobs it was enqueued after."""
        return self.status == JobStatus.WAITING

    @property
    def is_cancellable(self) -> bool:
        """Pending or waiting, or running and not yet asked to stop."""
        return self.status in (JobStatus.PENDING, JobStatus.WAITING) or (
            self.status == JobStatus.RUNNING and self.cancel_requested_at is None
        )

    @property
    def is_retryable(self) -> bool:
        """Whether a manual retry applies (:func:`django_pgqueue.states.is_retryable`)."""
        return is_retryable(self.status, self.attempts)

    @property
    def queued_for(self) -> timedelta | None:
        """Time from enqueue (or the last retry's run_after) to the start of the last attempt."""
        if self.started_at is None:
            return None
        return max(self.started_at - self.created_at, timedelta(0))

    @property
    def ran_for(self) -> timedelta | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return max(self.finished_at - self.started_at, timedelta(0))

    # ----- state transitions (one row; the worker batches its own) ----------------------------

    def _this(self) -> JobQuerySet:
        return Job.objects.get_queryset().using(self._state.db).filter(pk=self.pk)

    def retry(self) -> bool:
        """Make this dead, cancelled or failed job runnable now with its attempts reset."""
        changed = bool(self._this().retry())
        if changed:
            self.refresh_from_db()
        return changed

    def cancel(self) -> bool:
        """Cancel this job: a pending one at once; a running one is asked to stop.

        A running job sees ``current_job().cancel_requested`` become true within a second and
        ends ``cancelled`` whatever its attempt returns (see ``docs/control.md``). Returns
        whether anything changed.
        """
        changed = bool(self._this().cancel())
        if changed:
            self.refresh_from_db()
        return changed


class Dependency(models.Model):
    """An edge of a workflow: ``child`` runs once ``parent`` has completed (``using(after=)``,
    ``chain``). Written once, at the child's enqueue; the triggers of ``0022_workflows`` keep
    ``satisfied`` (the parent completed, counted in the child's ``parents_left``) and
    ``cascaded`` (the parent's end cancelled the child) as the parent's status changes."""

    id = models.BigAutoField(primary_key=True)
    child = models.ForeignKey(
        Job,
        db_constraint=False,
        db_index=False,
        on_delete=models.DO_NOTHING,
        related_name="parent_links",
    )
    parent = models.ForeignKey(
        Job, db_constraint=False, on_delete=models.DO_NOTHING, related_name="child_links"
    )
    satisfied = models.BooleanField(default=False, db_default=False)
    cascaded = models.BooleanField(default=False, db_default=False)

    objects = QueueManager["Dependency"]()

    class Meta:
        db_table = "pgqueue_job_dependency"
        constraints = [
            models.UniqueConstraint("child", "parent", name="pgqueue_dependency_edge"),
        ]

    def __str__(self) -> str:
        return f"#{self.child_id} after #{self.parent_id}"


class Batch(models.Model):
    """Jobs enqueued together (``with batch(...)``), and what runs once every one has ended.

    Sealed when its block closed and its transaction committed; finished (``finished_at``) once
    sealed and no member is active, which enqueues its callbacks (``fired``) in the same
    transaction, once. A member retried re-opens it. Counted by buckets of member ids
    (:class:`BatchTally`), so that no single row takes a write per member."""

    id = models.BigAutoField(primary_key=True)
    description = models.CharField(max_length=255, blank=True, default="", db_default="")
    on_success = TolerantJSONField(null=True, blank=True, help_text="Enqueued if all completed.")
    on_failure = TolerantJSONField(
        null=True, blank=True, help_text="Enqueued if any ended dead or cancelled."
    )
    on_complete = TolerantJSONField(null=True, blank=True, help_text="Enqueued in either case.")
    created_at = models.DateTimeField(default=timezone.now, db_default=Now())
    sealed_at = models.DateTimeField(
        null=True, blank=True, help_text="Its block closed and its members were committed."
    )
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="Every member ended; its callbacks were enqueued."
    )
    buckets_left = models.IntegerField(
        default=0, db_default=0, help_text="Buckets of members with some still active."
    )
    failed_buckets = models.IntegerField(
        default=0, db_default=0, help_text="Ended buckets with a dead or cancelled member."
    )
    fired = TolerantJSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        help_text="Callbacks enqueued: [{callback, job, at}], one entry per finish.",
    )

    objects = QueueManager["Batch"]()

    class Meta:
        db_table = "pgqueue_batch"
        ordering = ["-id"]
        verbose_name_plural = "batches"
        indexes = [
            # Pruning: finished batches past the retention.
            models.Index(
                fields=["finished_at"],
                name="pgqueue_batch_finished",
                condition=Q(finished_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"batch #{self.pk}" + (f" ({self.description})" if self.description else "")

    def counts(self) -> dict[str, int]:
        """Its members by status (every status, 0 when none)."""
        from django_pgqueue import operations
        from django_pgqueue.conf import settings

        db = operations.DjangoDatabase(self._state.db or settings.DATABASE)
        return operations.batch_counts(db, self.pk)


class BatchTally(models.Model):
    """A bucket of a sealed batch's members (ids ``bucket * 128`` to ``bucket * 128 + 127``):
    how many are active, how many ended dead or cancelled. Derived from the members."""

    id = models.BigAutoField(primary_key=True)
    batch = models.ForeignKey(
        Batch, db_constraint=False, db_index=False, on_delete=models.DO_NOTHING
    )
    bucket = models.BigIntegerField()
    unfinished = models.IntegerField()
    failed = models.IntegerField()

    objects = QueueManager["BatchTally"]()

    class Meta:
        db_table = "pgqueue_batch_tally"
        constraints = [
            models.UniqueConstraint("batch", "bucket", name="pgqueue_batch_tally_bucket"),
        ]

    def __str__(self) -> str:
        return f"batch #{self.batch_id} bucket {self.bucket}: {self.unfinished} active"


class Worker(models.Model):
    """A worker process, as it last reported itself (upserted on every heartbeat).

    Rows of workers gone for longer than an hour are deleted by the other workers' pruning.
    """

    worker_id = models.CharField(max_length=255, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list, help_text="Queues served, in order; [] means all.")
    threads = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    jobs_done = models.BigIntegerField(default=0, help_text="Attempts finished since start.")
    stopped_at = models.DateTimeField(null=True, blank=True)
    abandoned = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        help_text="Jobs whose abandoned attempt's thread still runs here.",
    )
    listening = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Its listening connection is open: enqueue() may wake it directly.",
    )
    listener = models.CharField(
        max_length=20,
        null=True,
        blank=True,
        editable=False,
        help_text="The tag of the connection that listens for it when another process's (the "
        "relay of its run_jobs --processes); empty: its own.",
    )

    objects = QueueManager["Worker"]()

    class Meta:
        db_table = "pgqueue_worker"
        ordering = ["-last_seen_at"]

    def __str__(self) -> str:
        return self.worker_id


class Queue(models.Model):
    """A queue's runtime settings. No row means: running, no limits (see docs/control.md).

    Change it through :func:`django_pgqueue.pause_queue`, :func:`~django_pgqueue.resume_queue`,
    ``manage.py pgqueue_queue`` or the dashboard: they tell the workers at once.
    """

    name = models.CharField(max_length=100, primary_key=True)
    paused = models.BooleanField(
        default=False, db_default=False, help_text="No worker starts a job of this queue."
    )
    concurrency_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most jobs of this queue running at once, all workers."
    )
    rate_limit = models.CharField(
        max_length=32, null=True, blank=True, help_text='Most job starts per period, e.g. "10/s".'
    )
    updated_at = models.DateTimeField(default=timezone.now, db_default=Now())

    objects = QueueManager["Queue"]()

    class Meta:
        db_table = "pgqueue_queue"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class RateWindow(models.Model):
    """The recent starts of one rate limit: a job ``rate_key`` (``key:<rate_key>``) or a queue's
    ``rate_limit`` (``queue:<name>``). The claim allows a start only while fewer than ``starts``
    were counted in the last ``period`` seconds (a sliding window): ``recent`` holds their
    times, or for a window of more than 100 starts the start of each hundredth of the period
    that had some, with their number in ``counts`` (``sql.limits``)."""

    id = models.CharField(max_length=300, primary_key=True)
    starts = models.PositiveIntegerField()
    period = models.FloatField(help_text="Seconds.")
    recent = TimestampArrayField(default=list)
    counts = IntegerArrayField(default=list)
    updated_at = models.DateTimeField(default=timezone.now, db_default=Now())

    objects = QueueManager["RateWindow"]()

    class Meta:
        db_table = "pgqueue_rate_window"

    def __str__(self) -> str:
        return f"{self.id}: {self.starts} per {self.period:g}s"


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

    objects = ScheduleManager()

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
        self.next_run_at = self.timing().next_after(now or timezone.now())

    def upcoming(self, count: int = 5, now: datetime | None = None) -> list[datetime]:
        return self.timing().upcoming(now or timezone.now(), count)

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

    def clean_fields(self, exclude: Collection[str] | None = None) -> None:
        """The fields' own checks, then whether the schedule can run: timing, zone, a registered
        job, arguments that fit it. Each error names a field, and a field in ``exclude`` (not
        on the form being saved, such as every field but *enabled* in the admin's list) is not
        checked: Django can't put an error on a field the form doesn't have."""
        from django_pgqueue import registry
        from django_pgqueue.arguments import serialize_arguments
        from django_pgqueue.exceptions import InvalidJobArguments

        skip = set(exclude or ())
        try:
            super().clean_fields(exclude)
        except ValidationError as exc:
            errors = exc.message_dict
            skip.update(errors)
        else:
            errors = {}
        found: dict[str, str] = {}
        if bool(self.cron) == (self.every is not None):
            found["cron"] = "Give either a cron expression or an interval (every), not both."
        elif not {"cron", "every", "timezone"} & skip:
            try:
                self.timing()
            except ValueError as exc:
                found["every" if self.every is not None else "cron"] = str(exc)
        if "job" in skip:
            pass  # unknown: the arguments can't be checked against it either
        elif self.job not in registry.names():
            found["job"] = f"No job named {self.job!r} is registered."
        elif not isinstance(self.args, list):
            found["args"] = "Positional arguments must be a JSON list."
        elif not isinstance(self.kwargs, dict):
            found["kwargs"] = "Keyword arguments must be a JSON object."
        elif not {"args", "kwargs"} & skip:
            try:
                signature = inspect.signature(registry.get(self.job).func)
                serialize_arguments(self.job, self.args, self.kwargs, signature)
            except InvalidJobArguments as exc:
                found["args"] = str(exc)
        for field, message in found.items():
            if field not in skip:
                errors.setdefault(field, []).append(message)
        if errors:
            raise ValidationError(errors)

    def run_now(self) -> Job:
        """Enqueue one run now, without moving the schedule."""
        from django_pgqueue import operations
        from django_pgqueue.conf import settings

        return operations.run_schedule_now(operations.DjangoDatabase(settings.DATABASE), self)


__all__ = ["Batch", "BatchTally", "Dependency", "Job", "Queue", "RateWindow", "Schedule", "Worker"]
