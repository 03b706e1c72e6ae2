"""Next-tick maths and @job's periodic options: pure functions of a fake clock, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_pgqueue import job, registry
from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.schedules.declaration import declared
from django_pgqueue.schedules.timing import CATCH_UP_LIMIT, Timing

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def at(*parts: int, tz: ZoneInfo | None = None) -> datetime:
    return datetime(*parts, tzinfo=tz or UTC)  # type: ignore[misc]


@pytest.fixture
def clean_registry():
    """Jobs registered by a test are gone after it (so no sync ever sees them)."""
    saved = dict(registry._registry)
    yield
    registry._registry.clear()
    registry._registry.update(saved)


def test_every_ticks_on_a_grid_from_the_epoch_strictly_after_now():
    timing = Timing("", 30, "UTC")
    assert timing.next_after(at(2026, 1, 1, 12, 0, 0)) == at(2026, 1, 1, 12, 0, 30)
    assert timing.next_after(at(2026, 1, 1, 12, 0, 29, 999999)) == at(2026, 1, 1, 12, 0, 30)
    assert timing.upcoming(at(2026, 1, 1, 12, 0, 10), 3) == [
        at(2026, 1, 1, 12, 0, 30),
        at(2026, 1, 1, 12, 1, 0),
        at(2026, 1, 1, 12, 1, 30),
    ]


def test_cron_with_a_seconds_field():
    timing = Timing("*/15 * * * * *", None, "UTC")
    assert timing.upcoming(at(2026, 1, 1, 12, 0, 1), 3) == [
        at(2026, 1, 1, 12, 0, 15),
        at(2026, 1, 1, 12, 0, 30),
        at(2026, 1, 1, 12, 0, 45),
    ]


def test_cron_is_read_in_the_schedules_own_time_zone():
    timing = Timing("0 3 * * *", None, "America/New_York")
    tick = timing.next_after(at(2026, 1, 10, 12, 0))
    assert tick.tzinfo == UTC
    assert tick.astimezone(NEW_YORK) == at(2026, 1, 11, 3, 0, tz=NEW_YORK)


@pytest.mark.parametrize(
    ("days", "label"),
    [
        ((at(2026, 3, 27), at(2026, 3, 31)), "spring"),
        ((at(2026, 10, 23), at(2026, 10, 28)), "fall"),
    ],
)
@pytest.mark.parametrize("expression", ["0 3 * * *", "30 2 * * *"])
def test_a_daily_schedule_runs_once_each_day_across_dst(days, label, expression):
    """03:00 and 02:30 in Paris, through the day the clocks jump forward (02:00 -> 03:00: 02:30
    does not exist and runs right after the jump) and the day they go back (02:00-03:00
    happens twice: it runs once)."""
    timing = Timing(expression, None, "Europe/Paris")
    start, end = days
    ticks = []
    tick = start
    while True:
        tick = timing.next_after(tick)
        if tick >= end:
            break
        ticks.append(tick.astimezone(PARIS))
    dates = [t.date() for t in ticks]
    assert len(dates) == len(set(dates)) == (end - start).days, ticks
    for t in ticks:
        if expression == "0 3 * * *":
            assert (t.hour, t.minute) == (3, 0)
        else:
            assert (t.hour, t.minute) in {(2, 30), (3, 0)}


def test_the_same_dst_days_with_a_fake_clock_stepping_minute_by_minute():
    """What a worker firing every minute would see: one tick per day, none twice."""
    timing = Timing("30 2 * * *", None, "Europe/Paris")
    now = at(2026, 10, 24, 22, 0)
    next_run = timing.next_after(now)
    fired = []
    while now < at(2026, 10, 26, 6, 0):
        now += timedelta(minutes=1)
        ticks, _ = timing.due(next_run, now, 1) if next_run <= now else ([], 0)
        if ticks:
            fired += ticks
            next_run = timing.next_after(now)
    assert [t.astimezone(PARIS).strftime("%d %H:%M %Z") for t in fired] == [
        "25 02:30 CEST",
        "26 02:30 CET",
    ]


def test_due_latest_only_and_catch_up():
    timing = Timing("", 60, "UTC")
    start = at(2026, 1, 1, 0, 0)
    now = at(2026, 1, 1, 1, 0, 5)
    assert timing.due(start, now, 1) == ([at(2026, 1, 1, 1, 0)], 60)
    ticks, skipped = timing.due(start, now, CATCH_UP_LIMIT)
    assert (len(ticks), skipped, ticks[0], ticks[-1]) == (61, 0, start, at(2026, 1, 1, 1, 0))
    ticks, skipped = timing.due(start, at(2026, 1, 2), CATCH_UP_LIMIT)
    assert (len(ticks), skipped, ticks[-1]) == (100, 1341, at(2026, 1, 2))
    assert timing.due(start, start - timedelta(seconds=1), 1) == ([], 0)


def test_due_for_cron_after_a_long_outage_counts_back_from_now():
    timing = Timing("* * * * *", None, "UTC")
    ticks, skipped = timing.due(at(2026, 1, 1), at(2026, 1, 10, 0, 0, 30), 3)
    assert ticks == [at(2026, 1, 9, 23, 58), at(2026, 1, 9, 23, 59), at(2026, 1, 10)]
    assert skipped >= 1000


@pytest.mark.parametrize(
    ("cron", "every", "zone", "message"),
    [
        ("61 * * * *", None, "UTC", "invalid"),
        ("* * *", None, "UTC", "5 fields"),
        ("", 0.5, "UTC", "at least 1 second"),
        ("* * * * *", 10, "UTC", "exactly one"),
        ("", None, "UTC", "exactly one"),
        ("* * * * *", None, "Mars/Olympus", "unknown time zone"),
    ],
)
def test_bad_timing_is_refused_with_a_clear_message(cron, every, zone, message):
    with pytest.raises(ValueError, match=message):
        Timing(cron, every, zone)


def test_job_declares_a_schedule_named_after_it(clean_registry):
    @job(name="tests.periodic.sync", every=timedelta(seconds=30), schedule_args=(7,))
    def sync_inventory(warehouse_id: int) -> None: ...

    @job(name="tests.periodic.nightly", cron="0 3 * * *", cron_timezone="Europe/Paris")
    def nightly() -> None: ...

    found = {d.name: d for d in declared()}
    assert found["tests.periodic.sync"].every == 30.0
    assert found["tests.periodic.sync"].args == [7]
    assert found["tests.periodic.nightly"].timezone == "Europe/Paris"
    assert found["tests.periodic.nightly"].values("UTC")["timezone"] == "Europe/Paris"
    assert found["tests.periodic.sync"].values("Asia/Tokyo")["timezone"] == "Asia/Tokyo"


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"cron": "0 3 * * *", "every": 60}, ValueError, "not both"),
        ({"cron": "0 25 * * *"}, ValueError, "invalid"),
        ({"every": timedelta(milliseconds=10)}, ValueError, "every"),
        ({"every": 60, "cron_timezone": "Europe/Paris"}, ValueError, "cron= schedules only"),
        ({"cron": "0 3 * * *", "cron_timezone": "Nowhere/Land"}, ValueError, "time zone"),
        ({"catch_up": True}, ValueError, "need cron= or every="),
        ({"every": 60, "schedule_args": (1, 2)}, InvalidJobArguments, "too many"),
        ({"every": 60, "schedule_args": ({1, 2},)}, InvalidJobArguments, "JSON"),
    ],
)
def test_bad_periodic_options_fail_at_import(clean_registry, options, error, message):
    with pytest.raises(error, match=message):

        @job(name="tests.periodic.bad", **options)
        def bad(x: int = 0) -> None: ...

    assert "tests.periodic.bad" not in registry.names()
