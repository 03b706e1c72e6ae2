"""One job's settings in one frozen object, checked in one place.

``@job``, ``JobFunction.using()``, ``@task`` / ``PgQueueTask`` and a PgQueueBackend's
``OPTIONS`` all build a :class:`JobSpec`; the registry hands it to the worker. ``None`` means
"the ``PGQUEUE_*`` setting's value when it is used", so settings changed later still apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_pgqueue import rules
from django_pgqueue.conf import settings
from django_pgqueue.retries import RetryStrategy

_SECONDS = ("backoff_base", "backoff_max", "timeout", "every")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """Where and how a job is enqueued, retried and timed out.

    Raises TypeError or ValueError naming the option and its allowed range
    (:data:`django_pgqueue.rules.JOB_OPTIONS`) when built with a bad value.
    """

    name: str
    queue: str | None = None
    priority: int = 0
    max_attempts: int | None = None
    #: A datetime, or a timedelta counted from each enqueue; None is "now".
    run_after: datetime | timedelta | None = None
    unique_key: str | None = None
    concurrency_key: str | None = None
    #: At most this many jobs with the same ``concurrency_key`` run at once (None: 1).
    concurrency_limit: int | None = None
    #: At most N starts per period (``"10/s"``) of jobs with the same ``rate_key``...
    rate_limit: str | None = None
    #: ... (None: the job's name), across every worker (docs/control.md).
    rate_key: str | None = None
    #: Retry delay: ``backoff_base * 2 ** (attempt - 1)`` seconds (plus jitter) ...
    #: (seconds, or a timedelta: kept as seconds)
    backoff_base: float | None = None
    #: ... at most ``backoff_max`` seconds.
    backoff_max: float | None = None
    #: Seconds an attempt may run before it fails as hung.
    timeout: float | None = None
    #: The database whose transaction ``enqueue_on_commit`` waits for (None: Django's default).
    commit_using: str | None = None
    #: Periodic: a cron expression (5 fields, or 6 with leading seconds) ...
    cron: str | None = None
    #: ... or an interval (seconds, or a timedelta: kept as seconds; at least 1 s).
    every: float | None = None
    #: The arguments of the scheduled calls.
    schedule_args: tuple[Any, ...] = ()
    schedule_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: The IANA zone ``cron`` is read in (None: ``TIME_ZONE`` when the schedule is created).
    cron_timezone: str | None = None
    #: After an outage, enqueue every missed tick (capped) instead of only the latest.
    catch_up: bool = False
    #: An ``async def`` job: stored as such (``pgqueue_job.is_async``), run on a worker's event
    #: loop (docs/async.md). Set from the function, never an option.
    is_async: bool = False
    #: The ids of the jobs it waits for (``using(after=...)``): it runs once each completed.
    after: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in _SECONDS:  # timedeltas are accepted; seconds are kept
            object.__setattr__(self, name, rules.to_seconds(getattr(self, name)))
        for name in rules.JOB_OPTIONS:
            rules.check(rules.JOB_OPTIONS, name, getattr(self, name))
        for name in _SECONDS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(value))
        run_after = self.run_after
        if run_after is not None:
            if not isinstance(run_after, datetime | timedelta):
                raise TypeError(
                    f"run_after must be a datetime or a timedelta, not {type(run_after).__name__}"
                )
            if isinstance(run_after, timedelta):
                rules.check(
                    {"run_after": rules.Number(0, rules.MAX_SECONDS)}, "run_after", run_after
                )
        self._check_schedule()
        self._check_after()

    def _check_after(self) -> None:
        after = self.after
        if not isinstance(after, tuple | list):
            raise TypeError(f"after must be a list of jobs or job ids, not {type(after).__name__}")
        for parent in after:
            if isinstance(parent, bool) or not isinstance(parent, int) or parent < 1:
                raise TypeError(f"after takes jobs or job ids (positive integers), not {parent!r}")
        if self.after and self.periodic:
            raise ValueError(f"job {self.name!r}: a periodic job cannot wait for others (after=)")
        # Each parent once, in the order given.
        object.__setattr__(self, "after", tuple(dict.fromkeys(after)))

    def _check_schedule(self) -> None:
        from django_pgqueue.schedules.timing import check_cron, zone

        if self.cron is not None and self.every is not None:
            raise ValueError(f"job {self.name!r}: give cron or every, not both")
        if self.cron is not None:
            object.__setattr__(self, "cron", check_cron(self.cron))
        elif self.cron_timezone is not None:
            raise ValueError(f"job {self.name!r}: cron_timezone applies to cron= schedules only")
        if self.cron_timezone is not None:
            zone(self.cron_timezone)
        if not self.periodic and (self.schedule_args or self.schedule_kwargs or self.catch_up):
            raise ValueError(
                f"job {self.name!r}: schedule_args, schedule_kwargs and catch_up need cron= "
                "or every="
            )
        if not isinstance(self.schedule_args, tuple | list):
            raise TypeError("schedule_args must be a tuple or a list")
        if not isinstance(self.schedule_kwargs, Mapping):
            raise TypeError("schedule_kwargs must be a dict")
        object.__setattr__(self, "schedule_args", tuple(self.schedule_args))

    @property
    def periodic(self) -> bool:
        """Declared with ``cron=`` or ``every=``: a schedule is synced for it."""
        return self.cron is not None or self.every is not None

    def using(self, **changes: Any) -> JobSpec:
        """A copy with the options given replaced (``None`` keeps the current value)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown job options: {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def with_defaults(self, **defaults: Any) -> JobSpec:
        """A copy where the options still None take these values (e.g. a backend's OPTIONS)."""
        return dataclasses.replace(
            self, **{k: v for k, v in defaults.items() if getattr(self, k) is None}
        )

    # ----- values resolved against the settings ----------------------------------------------

    @property
    def limited(self) -> bool:
        """Whether the claim must count this job against a limit above one or a rate."""
        return self.rate_limit is not None or (self.concurrency_limit or 1) > 1

    @property
    def resolved_concurrency_limit(self) -> int | None:
        """Stored on the row only above 1 (and with a key): NULL keeps the plain claim's rule."""
        limit = self.concurrency_limit
        return limit if limit is not None and limit > 1 and self.concurrency_key else None

    @property
    def resolved_rate_key(self) -> str | None:
        return None if self.rate_limit is None else (self.rate_key or self.name)

    @property
    def resolved_queue(self) -> str:
        return self.queue or settings.DEFAULT_QUEUE

    @property
    def resolved_max_attempts(self) -> int:
        return self.max_attempts or settings.MAX_ATTEMPTS

    @property
    def resolved_timeout(self) -> float | None:
        """Seconds an attempt may run (None: no limit)."""
        return self.timeout if self.timeout is not None else settings.JOB_TIMEOUT

    def resolved_run_after(self) -> datetime | None:
        """An aware datetime, or None for "now" (the database's clock)."""
        value = self.run_after
        if value is None:
            return None
        if isinstance(value, timedelta):
            return timezone.now() + value
        if timezone.is_naive(value):
            return timezone.make_aware(value)
        return value

    def retry_strategy(self) -> RetryStrategy:
        return RetryStrategy(
            base=self.backoff_base if self.backoff_base is not None else settings.BACKOFF_BASE,
            cap=self.backoff_max if self.backoff_max is not None else settings.BACKOFF_MAX,
            jitter=settings.BACKOFF_JITTER,
        )
