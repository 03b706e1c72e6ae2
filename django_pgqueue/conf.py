"""Every setting of django_pgqueue, with its default.

Settings are read from Django's settings once and kept until Django says one changed
(``setting_changed``: ``override_settings`` and pytest-django's ``settings`` fixture send it),
so tests may change them and a worker reads them at every job for the cost of a dict lookup
(a missing setting's ``getattr`` with a default raises and catches inside Django each time:
measured at 10 % of a no-op job's worker CPU). Nothing else in the package calls
``getattr(settings, ...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed

from django_pgqueue.rules import log_level

PREFIX = "PGQUEUE_"

#: Name -> default. ``docs/settings.md`` documents each one.
DEFAULTS: dict[str, Any] = {
    # The database alias that holds the job table.
    "DATABASE": "default",
    # Queue used when a job does not name one.
    "DEFAULT_QUEUE": "default",
    # Attempts before a failing job goes ``dead`` (1 = never retried).
    "MAX_ATTEMPTS": 5,
    # Retry delay: BACKOFF_BASE * 2 ** (attempt - 1) seconds, times (1 + up to BACKOFF_JITTER),
    # capped at BACKOFF_MAX seconds.
    "BACKOFF_BASE": 10.0,
    "BACKOFF_MAX": 3600.0,
    "BACKOFF_JITTER": 0.3,
    # Seconds after its last heartbeat before a running job counts as abandoned and is reclaimed.
    "VISIBILITY_TIMEOUT": 60.0,
    # Seconds between heartbeats; None means VISIBILITY_TIMEOUT / 4.
    "HEARTBEAT_INTERVAL": None,
    # How long completed and cancelled jobs are kept (timedelta or seconds; 0 deletes at once).
    "RETENTION": timedelta(days=7),
    # How long dead jobs are kept (timedelta or seconds); None keeps them until retried or deleted.
    "DEAD_RETENTION": timedelta(days=30),
    # Rows deleted per pruning statement; workers prune at most once per PRUNE_INTERVAL seconds.
    "PRUNE_BATCH_SIZE": 1000,
    "PRUNE_INTERVAL": 60.0,
    # Worker: seconds between looks for jobs the storage lost track of (docs/storage.md): a
    # pending job no claim can reach is put back within about this long.
    "REPAIR_INTERVAL": 30.0,
    # Worker: wake up on LISTEN/NOTIFY (False for PgBouncer in transaction mode).
    "LISTEN": True,
    # enqueue(): wake a worker once the transaction commits (True or "after_commit"), inside it
    # ("in_transaction": no statement more, but notifying commits are serialized), or not at
    # all (False: every worker polls, PGQUEUE_LISTEN = False everywhere).
    "NOTIFY": True,
    # Worker: prepare its statements on the server (False behind PgBouncer < 1.21 in
    # transaction mode, or without max_prepared_statements).
    "PREPARED_STATEMENTS": True,
    # Worker: seconds between polls when nothing wakes it.
    "POLL_INTERVAL": 2.0,
    # Worker: the most jobs claimed ahead per process in one statement (claims start at 100 and
    # double while they come back full: worker.capacity).
    "BATCH_SIZE": 1000,
    # Worker: completions are written when this many are buffered, or after FLUSH_INTERVAL seconds.
    "FLUSH_SIZE": 100,
    "FLUSH_INTERVAL": 0.05,
    # Seconds a job may run before it counts as hung and fails (None: no limit; @job(timeout=)
    # overrides it per job).
    "JOB_TIMEOUT": None,
    # Worker: seconds a graceful shutdown waits for running jobs.
    "SHUTDOWN_TIMEOUT": 30.0,
    # How many times a job may be handed back by a worker's shutdown without spending an attempt
    # (docs/worker.md, "Deploys and long jobs"); past it each interruption counts as one.
    "MAX_INTERRUPTIONS": 10,
    # Worker: seconds a cancelled running job has to return before its thread is abandoned and
    # replaced (its late result dropped); None waits for it however long it runs.
    "CANCEL_TIMEOUT": 30.0,
    # Worker: how many async def jobs one process runs at once on its event loop, beside its
    # threads (docs/async.md); run_jobs --async-concurrency.
    "ASYNC_CONCURRENCY": 1000,
    # Worker: a job that keeps the event loop from running for this many seconds (time.sleep,
    # sync ORM calls in an async def) is named in a warning (docs/async.md).
    "ASYNC_BLOCKED_WARNING": 0.5,
    # Worker: enqueue the periodic schedules' jobs when due (False: this worker only runs jobs).
    "FIRE_SCHEDULES": True,
    # The level of the line a failed attempt logs when the job will be retried (one line, no
    # traceback), and of the line of the last failure, the job dead (with the traceback).
    "RETRY_LOG_LEVEL": "WARNING",
    "FAILURE_LOG_LEVEL": "ERROR",
    # run_jobs serves /metrics, /healthz and /readyz on this port (None: no probe port;
    # run_jobs --probe-port), bound to PROBE_HOST (docs/monitoring.md).
    "PROBE_PORT": None,
    "PROBE_HOST": "127.0.0.1",
    # A request to the web app's metrics view (django_pgqueue.urls) with this bearer token is
    # let in; None: only staff users with the view permission.
    "METRICS_TOKEN": None,
}


def _seconds(value: Any) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


#: Name -> value, as read from Django's settings since the last change of one of ours.
_read: dict[str, Any] = {}
#: How many times one of ours changed.
_changes = [0]


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith(PREFIX) or setting == "USE_TZ":
        _changes[0] += 1
        _read.clear()


setting_changed.connect(_forget, dispatch_uid="django_pgqueue.conf")


def _keep(name: str, read: Callable[[], Any]) -> Any:
    """What ``read`` reads of Django's settings now, kept as ``name``'s unless one of ours
    changed while it was read (another thread's ``override_settings``)."""
    changes = _changes[0]
    value = read()
    if changes == _changes[0]:
        _read[name] = value
    return value


def now() -> datetime:
    """``django.utils.timezone.now()``, with ``USE_TZ`` kept as our settings are (Django's
    reads it through ``LazySettings`` at every call: the worker asks for the time two or three
    times a job)."""
    try:
        aware = _read["USE_TZ"]
    except KeyError:
        aware = _keep("USE_TZ", lambda: bool(django_settings.USE_TZ))
    return datetime.now(UTC) if aware else datetime.now()


class Settings:
    """Typed, live access to the ``PGQUEUE_*`` settings."""

    def get(self, name: str) -> Any:
        try:
            return _read[name]
        except KeyError:
            return _keep(name, lambda: getattr(django_settings, PREFIX + name, DEFAULTS[name]))

    @property
    def DATABASE(self) -> str:
        return str(self.get("DATABASE"))

    @property
    def DEFAULT_QUEUE(self) -> str:
        return str(self.get("DEFAULT_QUEUE"))

    @property
    def MAX_ATTEMPTS(self) -> int:
        return int(self.get("MAX_ATTEMPTS"))

    @property
    def BACKOFF_BASE(self) -> float:
        return _seconds(self.get("BACKOFF_BASE"))

    @property
    def BACKOFF_MAX(self) -> float:
        return _seconds(self.get("BACKOFF_MAX"))

    @property
    def BACKOFF_JITTER(self) -> float:
        return float(self.get("BACKOFF_JITTER"))

    @property
    def VISIBILITY_TIMEOUT(self) -> float:
        return _seconds(self.get("VISIBILITY_TIMEOUT"))

    @property
    def HEARTBEAT_INTERVAL(self) -> float:
        value = self.get("HEARTBEAT_INTERVAL")
        if value is None:
            return self.VISIBILITY_TIMEOUT / 4
        return _seconds(value)

    @property
    def RETENTION(self) -> float:
        return _seconds(self.get("RETENTION"))

    @property
    def DEAD_RETENTION(self) -> float | None:
        value = self.get("DEAD_RETENTION")
        return None if value is None else _seconds(value)

    @property
    def PRUNE_BATCH_SIZE(self) -> int:
        return int(self.get("PRUNE_BATCH_SIZE"))

    @property
    def PRUNE_INTERVAL(self) -> float:
        return _seconds(self.get("PRUNE_INTERVAL"))

    @property
    def REPAIR_INTERVAL(self) -> float:
        return _seconds(self.get("REPAIR_INTERVAL"))

    @property
    def LISTEN(self) -> bool:
        return bool(self.get("LISTEN"))

    @property
    def NOTIFY(self) -> str | None:
        """``"after_commit"``, ``"in_transaction"``, or None (no notification)."""
        value = self.get("NOTIFY")
        if value is True:
            return "after_commit"
        return str(value) if value else None

    @property
    def PREPARED_STATEMENTS(self) -> bool:
        return bool(self.get("PREPARED_STATEMENTS"))

    @property
    def POLL_INTERVAL(self) -> float:
        return _seconds(self.get("POLL_INTERVAL"))

    @property
    def BATCH_SIZE(self) -> int:
        return int(self.get("BATCH_SIZE"))

    @property
    def FLUSH_SIZE(self) -> int:
        return int(self.get("FLUSH_SIZE"))

    @property
    def FLUSH_INTERVAL(self) -> float:
        return _seconds(self.get("FLUSH_INTERVAL"))

    @property
    def JOB_TIMEOUT(self) -> float | None:
        value = self.get("JOB_TIMEOUT")
        return None if value is None else _seconds(value)

    @property
    def SHUTDOWN_TIMEOUT(self) -> float:
        return _seconds(self.get("SHUTDOWN_TIMEOUT"))

    @property
    def MAX_INTERRUPTIONS(self) -> int:
        return int(self.get("MAX_INTERRUPTIONS"))

    @property
    def CANCEL_TIMEOUT(self) -> float | None:
        value = self.get("CANCEL_TIMEOUT")
        return None if value is None else _seconds(value)

    @property
    def ASYNC_CONCURRENCY(self) -> int:
        return int(self.get("ASYNC_CONCURRENCY"))

    @property
    def ASYNC_BLOCKED_WARNING(self) -> float:
        return _seconds(self.get("ASYNC_BLOCKED_WARNING"))

    @property
    def FIRE_SCHEDULES(self) -> bool:
        return bool(self.get("FIRE_SCHEDULES"))

    @property
    def RETRY_LOG_LEVEL(self) -> int:
        """``logging``'s number for the level (the setting may name it)."""
        return log_level(self.get("RETRY_LOG_LEVEL"))

    @property
    def FAILURE_LOG_LEVEL(self) -> int:
        return log_level(self.get("FAILURE_LOG_LEVEL"))

    @property
    def PROBE_PORT(self) -> int | None:
        value = self.get("PROBE_PORT")
        return None if value is None else int(value)

    @property
    def PROBE_HOST(self) -> str:
        return str(self.get("PROBE_HOST"))

    @property
    def METRICS_TOKEN(self) -> str | None:
        value = self.get("METRICS_TOKEN")
        return None if value is None else str(value)


settings = Settings()
