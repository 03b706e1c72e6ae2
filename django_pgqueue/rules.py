"""The type and range of every job option and every ``PGQUEUE_*`` setting, in one table.

:data:`JOB_OPTIONS` is enforced when a :class:`~django_pgqueue.spec.JobSpec` is built (``@job``,
``using()``, ``@task`` and a backend's ``OPTIONS``); :data:`SETTINGS` by the system checks
(``django_pgqueue.E003``). The ranges are what PostgreSQL's column types and interval
arithmetic hold with room to spare; ``docs/settings.md`` lists them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, cast

from django_pgqueue.states import PRIORITY_MAX, PRIORITY_MIN

#: The longest duration anything accepts: 100 years (timestamps and intervals hold far more).
MAX_SECONDS = 100 * 365 * 86400.0
#: The most attempts a job may have (an ``integer`` column; counted once per claim).
MAX_ATTEMPTS = 1_000_000
QUEUE_NAME_MAX = 100
KEY_MAX = 255
#: A worker id is stored in 255-character columns, with ``.N`` added per process.
WORKER_ID_MAX = 250


class WrongType(str):
    """A problem that is the value's type (TypeError), not its range (ValueError)."""


class Rule:
    """What a value must be; :meth:`problem` says what is wrong with one, or None."""

    nullable: bool = False

    def problem(self, value: Any) -> str | None:
        if value is None:
            return None if self.nullable else WrongType("must not be None")
        return self._problem(value)

    def _problem(self, value: Any) -> str | None:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Integer(Rule):
    low: int
    high: int
    nullable: bool = False

    def _problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return WrongType(f"must be an int, not {type(value).__name__}")
        if not self.low <= value <= self.high:
            return f"must be between {self.low:,} and {self.high:,}, got {value:,}"
        return None

    def describe(self) -> str:
        return f"an int from {self.low:,} to {self.high:,}" + (" or None" if self.nullable else "")


@dataclass(frozen=True)
class Number(Rule):
    """A finite float or int (or a timedelta, with ``seconds``) in ``[low, high]``."""

    low: float
    high: float
    seconds: bool = True
    low_inclusive: bool = True
    nullable: bool = False

    def _problem(self, value: Any) -> str | None:
        if self.seconds and isinstance(value, timedelta):
            number = value.total_seconds()
        elif isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        else:
            kinds = "a number of seconds or a timedelta" if self.seconds else "a number"
            return WrongType(f"must be {kinds}, not {type(value).__name__}")
        if not math.isfinite(number):
            return f"must be finite, got {value!r}"
        too_low = number < self.low or (not self.low_inclusive and number == self.low)
        if too_low or number > self.high:
            return f"must be {self._range()}, got {number:g}"
        return None

    def _range(self) -> str:
        low = f"{'at least' if self.low_inclusive else 'more than'} {self.low:g}"
        high = "100 years" if self.seconds and self.high == MAX_SECONDS else f"{self.high:g}"
        return f"{low} and at most {high}"

    def describe(self) -> str:
        unit = "seconds (or a timedelta) " if self.seconds else ""
        return f"{unit}{self._range()}" + (", or None" if self.nullable else "")


@dataclass(frozen=True)
class Text(Rule):
    """A string of 1 to ``max_length`` characters without control characters or only spaces."""

    max_length: int
    nullable: bool = False

    def _problem(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return WrongType(f"must be a string, not {type(value).__name__}")
        if not value.strip():
            return f"must not be empty or blank, got {value!r}"
        if len(value) > self.max_length:
            return f"must be at most {self.max_length} characters, got {len(value)}"
        if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in value):
            return f"must not hold control characters or lone surrogates, got {value!r}"
        return None

    def describe(self) -> str:
        return f"a string of 1 to {self.max_length} printable characters" + (
            " or None" if self.nullable else ""
        )


@dataclass(frozen=True)
class Boolean(Rule):
    def _problem(self, value: Any) -> str | None:
        return (
            None if isinstance(value, bool) else WrongType(f"must be True or False, not {value!r}")
        )

    def describe(self) -> str:
        return "True or False"


@dataclass(frozen=True)
class Choice(Rule):
    """One of ``choices`` (compared with ``==``: ``True`` and ``False`` may be among them)."""

    choices: tuple[Any, ...]

    def _problem(self, value: Any) -> str | None:
        if any(value == c and type(value) is type(c) for c in self.choices):
            return None
        return f"must be one of {self.describe()}, got {value!r}"

    def describe(self) -> str:
        return ", ".join(repr(c) for c in self.choices)


#: The level names a ``*_LOG_LEVEL`` setting accepts, and their numbers (``logging``'s).
LOG_LEVELS: dict[str, int] = {
    "DEBUG": 10,
    "INFO": 20,
    "WARNING": 30,
    "ERROR": 40,
    "CRITICAL": 50,
}


@dataclass(frozen=True)
class LogLevel(Rule):
    """A ``logging`` level: one of :data:`LOG_LEVELS`' names (any case) or its number."""

    def _problem(self, value: Any) -> str | None:
        if isinstance(value, str):
            if value.upper() in LOG_LEVELS:
                return None
            return f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}"
        if isinstance(value, int) and not isinstance(value, bool):
            if value in LOG_LEVELS.values():
                return None
            return f"must be one of {', '.join(map(str, LOG_LEVELS.values()))}, got {value}"
        return WrongType(f"must be a level name or number, not {type(value).__name__}")

    def describe(self) -> str:
        return f"a logging level: {', '.join(f'{n!r}' for n in LOG_LEVELS)} or its number"


def log_level(value: Any) -> int:
    """A valid ``LogLevel`` value as ``logging``'s number."""
    return LOG_LEVELS[value.upper()] if isinstance(value, str) else int(value)


#: ``"10/s"``, ``"100/m"``, ``"5/2s"``, ``"1000/h"``, ``"20000/d"``: starts per period.
_RATE = re.compile(r"([1-9][0-9]{0,6})/([0-9]{0,5}(?:\.[0-9]{1,3})?)(s|m|h|d)")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: The most a concurrency limit allows (running jobs per key or per queue).
MAX_CONCURRENCY = 10_000


def parse_rate(text: str) -> tuple[int, float]:
    """``"10/s"`` -> ``(10, 1.0)``: starts, and the period in seconds (ValueError if bad)."""
    match = _RATE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            "rate_limit must look like '10/s', '100/m', '5/2s', '1000/h' or '20000/d', "
            f"got {text!r}"
        )
    count, multiple, unit = match.groups()
    period = (float(multiple) if multiple else 1.0) * _UNIT_SECONDS[unit]
    if not 0.001 <= period <= 7 * 86400:
        raise ValueError(f"rate_limit's period must be from 1 ms to 7 days, got {text!r}")
    return int(count), period


@dataclass(frozen=True)
class Rate(Rule):
    """A rate limit: ``"N/s"`` (or ``m``, ``h``, ``d``, with an optional number: ``"5/2s"``)."""

    nullable: bool = False

    def _problem(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return WrongType(f"must be a string like '10/s', not {type(value).__name__}")
        try:
            parse_rate(value)
        except ValueError as exc:
            return str(exc).removeprefix("rate_limit ")
        return None

    def describe(self) -> str:
        return "starts per period: '10/s', '100/m', '5/2s', '1000/h', '20000/d'" + (
            " or None" if self.nullable else ""
        )


def _seconds(low: float = 0, *, above: bool = False, nullable: bool = False) -> Number:
    return Number(low, MAX_SECONDS, low_inclusive=not above, nullable=nullable)


#: Per-job options: ``@job``, ``using()``, ``@task`` and a PgQueueBackend's ``OPTIONS``.
JOB_OPTIONS: dict[str, Rule] = {
    "name": Text(255),
    "queue": Text(QUEUE_NAME_MAX, nullable=True),
    "priority": Integer(PRIORITY_MIN, PRIORITY_MAX),
    "max_attempts": Integer(1, MAX_ATTEMPTS, nullable=True),
    "unique_key": Text(KEY_MAX, nullable=True),
    "concurrency_key": Text(KEY_MAX, nullable=True),
    "concurrency_limit": Integer(1, MAX_CONCURRENCY, nullable=True),
    "rate_limit": Rate(nullable=True),
    "rate_key": Text(KEY_MAX, nullable=True),
    "backoff_base": _seconds(nullable=True),
    "backoff_max": _seconds(nullable=True),
    "timeout": _seconds(above=True, nullable=True),
    "commit_using": Text(255, nullable=True),
    # Periodic jobs (docs/scheduling.md): also checked as a cron expression / an IANA zone.
    "cron": Text(255, nullable=True),
    "every": _seconds(1, nullable=True),
    "cron_timezone": Text(64, nullable=True),
    "catch_up": Boolean(),
}

#: ``PGQUEUE_<NAME>`` settings (defaults in :data:`django_pgqueue.conf.DEFAULTS`).
SETTINGS: dict[str, Rule] = {
    "DATABASE": Text(255),
    "DEFAULT_QUEUE": Text(QUEUE_NAME_MAX),
    "MAX_ATTEMPTS": Integer(1, MAX_ATTEMPTS),
    "BACKOFF_BASE": _seconds(),
    "BACKOFF_MAX": _seconds(),
    "BACKOFF_JITTER": Number(0, 10, seconds=False),
    "VISIBILITY_TIMEOUT": _seconds(above=True),
    "HEARTBEAT_INTERVAL": _seconds(above=True, nullable=True),
    "RETENTION": _seconds(),
    "DEAD_RETENTION": _seconds(nullable=True),
    "PRUNE_BATCH_SIZE": Integer(1, 1_000_000),
    "PRUNE_INTERVAL": _seconds(above=True),
    "REPAIR_INTERVAL": _seconds(above=True),
    "LISTEN": Boolean(),
    "NOTIFY": Choice((True, False, "after_commit", "in_transaction")),
    "PREPARED_STATEMENTS": Boolean(),
    "POLL_INTERVAL": _seconds(above=True),
    "BATCH_SIZE": Integer(1, 10_000),
    "FLUSH_SIZE": Integer(1, 10_000),
    "FLUSH_INTERVAL": _seconds(),
    "JOB_TIMEOUT": _seconds(above=True, nullable=True),
    "SHUTDOWN_TIMEOUT": _seconds(),
    "CANCEL_TIMEOUT": _seconds(nullable=True),
    "MAX_INTERRUPTIONS": Integer(0, 1_000_000),
    "FIRE_SCHEDULES": Boolean(),
    "ASYNC_CONCURRENCY": Integer(1, 100_000),
    "ASYNC_BLOCKED_WARNING": _seconds(above=True),
    "RETRY_LOG_LEVEL": LogLevel(),
    "FAILURE_LOG_LEVEL": LogLevel(),
    "PROBE_PORT": Integer(1, 65_535, nullable=True),
    "PROBE_HOST": Text(255),
    "METRICS_TOKEN": Text(1_000, nullable=True),
}


def _or_none(rule: Rule) -> Rule:
    """The same rule, allowing None (for an option whose None means "the setting")."""
    return cast("Rule", replace(cast("Any", rule), nullable=True))


#: The worker's options (``Worker``, ``Supervisor`` and ``run_jobs``); None means the default.
#: ``run_jobs``' argparse types come from here, and the worker checks its own arguments too.
WORKER_OPTIONS: dict[str, Rule] = {
    "queue": Text(QUEUE_NAME_MAX),
    "processes": Integer(1, 1_000),
    "threads": Integer(1, 1_000),
    "batch_size": _or_none(SETTINGS["BATCH_SIZE"]),
    "max_jobs": Integer(1, 10**12, nullable=True),
    "shutdown_timeout": _or_none(SETTINGS["SHUTDOWN_TIMEOUT"]),
    "cancel_timeout": _or_none(SETTINGS["CANCEL_TIMEOUT"]),
    "async_concurrency": _or_none(SETTINGS["ASYNC_CONCURRENCY"]),
    "worker_id": Text(WORKER_ID_MAX, nullable=True),
    "probe_port": _or_none(SETTINGS["PROBE_PORT"]),
    "probe_host": _or_none(SETTINGS["PROBE_HOST"]),
}


def to_seconds(value: Any) -> Any:
    """A timedelta as seconds; anything else as it is (for the rules to judge)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def check_worker_options(queues: Any = None, **values: Any) -> None:
    """Raise TypeError or ValueError for the first of a worker's options outside its rule."""
    if isinstance(queues, str):
        raise TypeError(f"queues must be a list of queue names, not the string {queues!r}")
    for queue in queues or ():
        check(WORKER_OPTIONS, "queue", queue)
    for name, value in values.items():
        check(WORKER_OPTIONS, name, value)


def check(table: dict[str, Rule], name: str, value: Any) -> None:
    """Raise TypeError (wrong type) or ValueError (out of range) naming the option."""
    problem = table[name].problem(value)
    if problem is None:
        return
    if isinstance(problem, WrongType):
        raise TypeError(f"{name} {problem} ({table[name].describe()})")
    raise ValueError(f"{name} {problem} ({table[name].describe()})")
