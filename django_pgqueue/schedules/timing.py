"""When a schedule's ticks fall: cron expressions (through cronsim) and fixed intervals.

Pure functions of a clock reading: nothing here reads the time itself, so the worker passes the
database's clock and the tests a fake one. Ticks are aware datetimes in UTC.

* ``cron``: five fields (minute hour day month weekday), or six with a leading seconds field,
  evaluated in the schedule's own time zone. DST follows Debian's cron, as cronsim does: a job
  at a fixed time that falls in the hour skipped in spring runs right after the jump, and one in
  the hour repeated in autumn runs once.
* ``every``: ticks at whole multiples of the interval since the Unix epoch (every 30 s at :00
  and :30, every hour on the hour in UTC), so every worker computes the same ticks.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

#: The shortest interval of an ``every`` schedule, in seconds.
MIN_EVERY = 1.0
#: The longest: 100 years (as any duration the queue accepts).
MAX_EVERY = 100 * 365 * 86400.0
#: Most ticks one firing enqueues for a ``catch_up`` schedule after an outage; older missed
#: ticks beyond these are skipped (and logged).
CATCH_UP_LIMIT = 100
# Missed ticks walked forward one by one before counting back from now instead.
_FORWARD_STEPS = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROS = 1_000_000


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` ("Europe/Paris", "UTC"); ValueError naming it if unknown."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"time zone must be an IANA name such as 'Europe/Paris', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (an IANA name such as 'Europe/Paris')"
        ) from None


def check_cron(expression: str) -> str:
    """The expression, stripped; ValueError saying what is wrong with it."""
    if not isinstance(expression, str):
        raise TypeError(f"cron must be a string, not {type(expression).__name__}")
    text = " ".join(expression.split())
    if len(text.split()) not in (5, 6):
        raise ValueError(
            f"cron {expression!r} must have 5 fields (minute hour day month weekday) or 6 "
            "(a leading seconds field)"
        )
    try:
        iterator = CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))
        next(iterator)
    except CronSimError as exc:
        raise ValueError(f"cron {expression!r} is invalid: {exc}") from None
    except StopIteration:
        raise ValueError(f"cron {expression!r} never matches a date") from None
    return text


def check_every(seconds: float) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"every must be a timedelta or seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds) or not MIN_EVERY <= seconds <= MAX_EVERY:
        raise ValueError(f"every must be at least 1 second and at most 100 years, got {seconds:g}")
    return float(seconds)


@dataclass(frozen=True)
class Timing:
    """One schedule's ticks: ``cron`` (in ``timezone``) or ``every`` seconds."""

    cron: str
    every: float | None
    timezone: str

    def __post_init__(self) -> None:
        if bool(self.cron) == (self.every is not None):
            raise ValueError("a schedule needs exactly one of cron and every")
        if self.cron:
            object.__setattr__(self, "cron", check_cron(self.cron))
        else:
            assert self.every is not None
            object.__setattr__(self, "every", check_every(self.every))
        zone(self.timezone)

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.timezone)

    # ----- the next tick ---------------------------------------------------------------------

    def next_after(self, now: datetime) -> datetime:
        """The first tick strictly after ``now`` (an aware datetime)."""
        if self.every is not None:
            step = self._every_micros()
            return _from_micros((_micros(now) // step + 1) * step)
        local = now.astimezone(self.zone)
        try:
            return next(CronSim(self.cron, local)).astimezone(UTC)
        except StopIteration:
            raise ValueError(f"cron {self.cron!r} has no run after {now:%Y-%m-%d}") from None

    def upcoming(self, now: datetime, count: int = 5) -> list[datetime]:
        """The next ``count`` ticks after ``now``."""
        ticks: list[datetime] = []
        tick = now
        for _ in range(count):
            tick = self.next_after(tick)
            ticks.append(tick)
        return ticks

    # ----- ticks that are due ----------------------------------------------------------------

    def due(self, start: datetime, now: datetime, limit: int) -> tuple[list[datetime], int]:
        """The ticks from ``start`` (the schedule's ``next_run_at``, itself a tick) up to
        ``now``: the latest ``limit`` of them, oldest first, and how many earlier ones are left
        out (a lower bound after a very long outage)."""
        if now < start:
            return [], 0
        if self.every is not None:
            step = self._every_micros()
            first = -(-_micros(start) // step)  # the first grid tick at or after start
            last = _micros(now) // step
            count = last - first + 1
            if count <= 0:  # ``start`` is off the grid (an edited row): it is the tick
                return [start], 0
            taken = min(count, limit)
            ticks = [_from_micros((last - taken + 1 + i) * step) for i in range(taken)]
            return ticks, count - taken
        kept: deque[datetime] = deque([start], maxlen=limit)
        total = 1
        tick = start
        for _ in range(_FORWARD_STEPS):
            tick = self.next_after(tick)
            if tick > now:
                return list(kept), total - len(kept)
            kept.append(tick)
            total += 1
        # All workers were down a long time: count the latest ticks back from now instead.
        recent = self._before(now, after=tick, limit=limit)
        merged = (list(kept) + recent)[-limit:]
        return merged, total + len(recent) - len(merged)

    def _before(self, now: datetime, *, after: datetime, limit: int) -> list[datetime]:
        """Up to ``limit`` ticks in ``(after, now]``, oldest first (cron only)."""
        # Ticks are whole seconds: counting back from the next whole second includes ``now``.
        start = now.replace(microsecond=0) + timedelta(seconds=1)
        found: list[datetime] = []
        for tick in CronSim(self.cron, start.astimezone(self.zone), reverse=True):
            tick = tick.astimezone(UTC)
            if tick <= after or len(found) >= limit:
                break
            if tick <= now:
                found.append(tick)
        found.reverse()
        return found

    # ----- words -----------------------------------------------------------------------------

    def describe(self) -> str:
        """ "Every 30 seconds", or cronsim's explanation of the cron expression and its zone."""
        if self.every is not None:
            return f"Every {describe_seconds(self.every)}"
        try:
            text = CronSim(self.cron, datetime(2000, 1, 1, tzinfo=UTC)).explain()
        except Exception:  # an explanation is a nicety; the expression itself is valid
            text = self.cron
        return f"{text} ({self.timezone})"

    def _every_micros(self) -> int:
        assert self.every is not None
        return max(round(self.every * _MICROS), 1)


def describe_seconds(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}" if count != 1 else unit
    if seconds == 1:
        return "second"
    return f"{seconds:g} seconds"


def _micros(value: datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * _MICROS + delta.microseconds


def _from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)
