"""Schedules on the real database: firing (exactly once, missed ticks, DST), sync, run now,
disable, broken schedules. A fake clock is passed to ``fire_schedules`` where time matters."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.apps import sync_schedules_after_migrate
from django_pgqueue.models import Job, Schedule
from django_pgqueue.schedules.declaration import Declaration
from django_pgqueue.schedules.sync import sync
from django_pgqueue.worker.connection import QueueConnection
from tests.utils import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

RECORD = "tests.testapp.jobs.record"
NOOP = "tests.testapp.jobs.noop"
PARIS = ZoneInfo("Europe/Paris")


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def make(name: str = "s", *, next_run_at: datetime | None = None, **fields) -> Schedule:
    fields.setdefault("job", NOOP)
    if "cron" not in fields:
        fields.setdefault("every", 60.0)
    schedule = Schedule(name=name, **fields)
    schedule.full_clean()
    schedule.save()
    if next_run_at is not None:
        Schedule.objects.filter(pk=schedule.pk).update(next_run_at=next_run_at)
        schedule.refresh_from_db()
    return schedule


def fire(now: datetime) -> operations.Fired:
    return operations.fire_schedules(operations.DjangoDatabase("default"), now=now)


def ticks(name: str = "s") -> list[datetime]:
    return list(
        Job.objects.filter(schedule=name).order_by("run_after").values_list("run_after", flat=True)
    )


def test_a_due_tick_enqueues_one_ordinary_job_and_advances_the_schedule():
    make(
        job=RECORD,
        args=["/dev/null", "x"],
        queue="periodic",
        priority=5,
        next_run_at=at(2026, 1, 1, 12),
    )
    fired = fire(at(2026, 1, 1, 12, 0, 0, 300000))
    assert (fired.schedules, fired.enqueued) == (1, 1)
    job = Job.objects.get(schedule="s")
    assert (job.name, job.args, job.queue, job.priority) == (
        RECORD,
        ["/dev/null", "x"],
        "periodic",
        5,
    )
    assert job.run_after == at(2026, 1, 1, 12)  # the tick
    schedule = Schedule.objects.get()
    assert (schedule.next_run_at, schedule.last_run_at) == (
        at(2026, 1, 1, 12, 1),
        at(2026, 1, 1, 12),
    )
    assert fired.next_due == at(2026, 1, 1, 12, 1)
    # Not due again until the next tick.
    assert fire(at(2026, 1, 1, 12, 0, 59)).enqueued == 0
    assert fire(at(2026, 1, 1, 12, 1, 0)).enqueued == 1
    assert ticks() == [at(2026, 1, 1, 12), at(2026, 1, 1, 12, 1)]


def test_the_jobs_own_options_apply_unless_the_schedule_overrides_them():
    make(job="tests.testapp.jobs.send_welcome", args=[1], next_run_at=at(2026, 1, 1))
    fire(at(2026, 1, 1))
    job = Job.objects.get(schedule="s")
    assert (job.queue, job.priority, job.max_attempts) == ("emails", 10, 5)


def test_missed_ticks_enqueue_the_latest_only_by_default_and_every_one_with_catch_up():
    make("latest", every=60, next_run_at=at(2026, 1, 1, 0, 0))
    make("all", every=60, catch_up=True, next_run_at=at(2026, 1, 1, 0, 0))
    make("capped", every=1, catch_up=True, next_run_at=at(2026, 1, 1, 0, 0))
    now = at(2026, 1, 1, 1, 0, 5)  # every worker was down for an hour
    fire(now)
    assert ticks("latest") == [at(2026, 1, 1, 1, 0)]
    assert len(ticks("all")) == 61
    assert ticks("all")[0] == at(2026, 1, 1) and ticks("all")[-1] == at(2026, 1, 1, 1)
    assert len(ticks("capped")) == 100 and ticks("capped")[-1] == at(2026, 1, 1, 1, 0, 5)
    for schedule in Schedule.objects.all():
        assert schedule.next_run_at > now


def test_dst_with_a_fake_clock_through_the_real_firing():
    """A daily 03:00 and 02:30 in Paris, fired by the real statement every 10 minutes through
    both 2026 DST changes: one job per day each."""
    make("three", cron="0 3 * * *", timezone="Europe/Paris", next_run_at=at(2026, 3, 27, 2))
    make("half", cron="30 2 * * *", timezone="Europe/Paris", next_run_at=at(2026, 3, 27, 1, 30))
    for start, end in [(at(2026, 3, 27, 1), at(2026, 3, 31)), (at(2026, 10, 24), at(2026, 10, 27))]:
        Schedule.objects.update(next_run_at=None)
        for s in Schedule.objects.all():
            s.reschedule(start)
            s.save()
        now = start
        while now < end:
            now += timedelta(minutes=10)
            fire(now)
    for name in ("three", "half"):
        local = [t.astimezone(PARIS) for t in ticks(name)]
        days = [t.date() for t in local]
        assert len(days) == len(set(days)) == 4 + 3, local
    assert {(t.astimezone(PARIS).hour, t.astimezone(PARIS).minute) for t in ticks("three")} == {
        (3, 0)
    }


def test_concurrent_firing_enqueues_each_tick_exactly_once():
    """Eight threads, each on its own connection, fire the same due ticks at once, over and
    over: SKIP LOCKED plus the advance in the same transaction leave one job per tick."""
    for i in range(5):
        make(f"s{i}", every=1, next_run_at=at(2026, 1, 1))
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker() -> None:
        conn = QueueConnection("default", "test firing")
        try:
            for step in range(30):
                barrier.wait(timeout=30)
                operations.fire_schedules(conn, now=at(2026, 1, 1) + timedelta(seconds=step))
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            conn.close()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    for i in range(5):
        got = ticks(f"s{i}")
        assert got == sorted(set(got)), "a tick was enqueued twice"
        assert got[0] == at(2026, 1, 1) and len(got) >= 25


def test_a_disabled_schedule_enqueues_nothing_and_restarts_from_now():
    schedule = make(every=60, next_run_at=at(2026, 1, 1))
    assert Schedule.objects.filter(pk=schedule.pk).disable() == 1
    schedule.refresh_from_db()
    assert (schedule.enabled, schedule.next_run_at) == (False, None)
    assert fire(at(2027, 1, 1)).enqueued == 0
    assert Schedule.objects.filter(pk=schedule.pk).enable() == 1
    schedule.refresh_from_db()
    # The disabled stretch is not "missed": the next run is the first tick from now.
    assert timezone.now() < schedule.next_run_at <= timezone.now() + timedelta(seconds=60)
    assert not Job.objects.exists()


def test_run_now_enqueues_one_run_without_moving_the_schedule():
    schedule = make(job=RECORD, args=["/dev/null", "now"], next_run_at=at(2030, 1, 1))
    job = schedule.run_now()
    assert (job.name, job.args, job.schedule, job.status) == (
        RECORD,
        ["/dev/null", "now"],
        "s",
        "pending",
    )
    assert job.run_after <= timezone.now()
    schedule.refresh_from_db()
    assert (schedule.next_run_at, schedule.last_run_at) == (at(2030, 1, 1), None)


def test_a_schedule_whose_row_cannot_fire_is_unscheduled_not_fatal():
    make("bad", every=60, next_run_at=at(2026, 1, 1))
    make("good", every=60, next_run_at=at(2026, 1, 1))
    Schedule.objects.filter(name="bad").update(
        timezone="Mars/Olympus", cron="* * * * *", every=None
    )
    fired = fire(at(2026, 1, 1, 0, 0, 1))
    assert fired.enqueued == 1 and ticks("good")
    bad = Schedule.objects.get(name="bad")
    assert bad.next_run_at is None and "time zone" in bad.problem()


def test_a_schedule_of_an_unregistered_job_is_broken_in_check():
    make("gone", job=NOOP)
    Schedule.objects.filter(name="gone").update(job="tests.testapp.jobs.deleted_long_ago")
    assert "not registered" in Schedule.objects.get(name="gone").problem()
    out = StringIO()
    call_command("check", "--database", "default", stdout=out, stderr=out)
    assert "django_pgqueue.W001" in out.getvalue() and "'gone'" in out.getvalue()
    # A plain check does not read the database.
    out = StringIO()
    call_command("check", stdout=out, stderr=out)
    assert "W001" not in out.getvalue()


def test_admin_validation_refuses_what_an_enqueue_would():
    from django.core.exceptions import ValidationError

    for fields, field in [
        ({"job": "no.such.job", "every": 60}, "job"),
        ({"job": RECORD, "every": 60, "args": ["only one"]}, "args"),
        ({"job": NOOP, "cron": "0 3 * * *", "every": 60}, "cron"),
        ({"job": NOOP, "cron": "not cron"}, "cron"),
        ({"job": NOOP, "cron": "0 3 * * *", "timezone": "Nowhere"}, "cron"),
    ]:
        with pytest.raises(ValidationError) as info:
            Schedule(name="x", **fields).full_clean()
        assert field in info.value.message_dict, fields


# ----- sync ------------------------------------------------------------------------------------

DECLARED = Declaration(job=RECORD, every=60.0, args=["/dev/null", "code"])


def test_sync_adds_updates_and_disables_code_schedules():
    report = sync(declarations=[DECLARED])
    assert report.created == [RECORD]
    schedule = Schedule.objects.get(name=RECORD)
    assert (schedule.source, schedule.every, schedule.args, schedule.enabled) == (
        "code",
        60.0,
        ["/dev/null", "code"],
        True,
    )
    assert schedule.next_run_at is not None and not schedule.edited
    assert sync(declarations=[DECLARED]).changed is False  # nothing to do: nothing written
    # A changed declaration of an unedited schedule applies.
    report = sync(
        declarations=[Declaration(job=RECORD, cron="0 3 * * *", args=["/dev/null", "v2"])]
    )
    schedule.refresh_from_db()
    assert report.updated == [RECORD]
    assert (schedule.cron, schedule.every, schedule.args) == (
        "0 3 * * *",
        None,
        ["/dev/null", "v2"],
    )
    # Gone from the code: disabled; back: enabled again.
    assert sync(declarations=[]).removed == [RECORD]
    schedule.refresh_from_db()
    assert (schedule.enabled, schedule.removed_from_code) == (False, True)
    sync(declarations=[DECLARED])
    schedule.refresh_from_db()
    assert (schedule.enabled, schedule.removed_from_code, schedule.every) == (True, False, 60.0)


def test_sync_never_overwrites_an_admin_edit_and_reset_to_code_restores_it():
    sync(declarations=[DECLARED])
    schedule = Schedule.objects.get(name=RECORD)
    schedule.every = 120.0  # edited in the admin
    schedule.args = ["/dev/null", "admin"]
    schedule.save()
    assert schedule.differences() == ["every", "args"]
    report = sync(declarations=[Declaration(job=RECORD, every=30.0, args=["/dev/null", "code v2"])])
    assert report.kept_edits == [RECORD]
    schedule.refresh_from_db()
    assert (schedule.every, schedule.args) == (120.0, ["/dev/null", "admin"])  # kept
    assert schedule.code_values["every"] == 30.0 and schedule.edited  # "differs from code"
    schedule.apply_code()  # the admin's "reset to code"
    schedule.save()
    schedule.refresh_from_db()
    assert (schedule.every, schedule.args, schedule.edited) == (
        30.0,
        ["/dev/null", "code v2"],
        False,
    )


def test_pausing_is_not_an_edit_and_survives_a_sync():
    sync(declarations=[DECLARED])
    Schedule.objects.disable()
    sync(declarations=[Declaration(job=RECORD, every=30.0, args=["/dev/null", "code"])])
    schedule = Schedule.objects.get()
    assert (schedule.enabled, schedule.every, schedule.edited) == (False, 30.0, False)


def test_a_change_of_time_zone_setting_does_not_shift_a_stored_schedule():
    nightly = Declaration(job=NOOP, cron="0 3 * * *")
    with override_settings(TIME_ZONE="Europe/Paris"):
        sync(declarations=[nightly])
    with override_settings(TIME_ZONE="America/New_York"):
        sync(declarations=[nightly])
        schedule = Schedule.objects.get()
        assert schedule.timezone == "Europe/Paris" and not schedule.edited
        # A new schedule takes the zone in force when it is created; each keeps its own.
        sync(declarations=[nightly, Declaration(job=RECORD, cron="0 4 * * *", args=["a", "b"])])
        assert Schedule.objects.get(name=RECORD).timezone == "America/New_York"


def test_sync_leaves_admin_schedules_alone_even_with_a_clashing_name():
    make(RECORD, job=RECORD, args=["/dev/null", "mine"])
    make("other", job=NOOP)
    report = sync(declarations=[DECLARED])
    assert report.conflicts == [RECORD]
    assert Schedule.objects.get(name=RECORD).args == ["/dev/null", "mine"]
    assert sync(declarations=[]).removed == []
    assert Schedule.objects.filter(enabled=True).count() == 2


def test_migrate_syncs_the_code_schedules(monkeypatch):
    from django_pgqueue.schedules import sync as sync_module

    monkeypatch.setattr(sync_module, "declared", lambda: [DECLARED])
    sync_schedules_after_migrate(using="default")
    assert Schedule.objects.get().name == RECORD


# ----- pgqueue_status ------------------------------------------------------------------------


def test_pgqueue_status_shows_the_schedules_as_a_table_and_json():
    import json

    make("nightly", cron="0 3 * * *", timezone="Europe/Paris")
    make("paused", every=60)
    Schedule.objects.filter(name="paused").disable()
    make("orphan", every=60)
    Schedule.objects.filter(name="orphan").update(job="tests.testapp.jobs.gone")
    out = StringIO()
    call_command("pgqueue_status", stdout=out)
    table = out.getvalue()
    assert "SCHEDULE" in table and "NEXT RUN" in table and "BROKEN" in table
    line = next(line for line in table.splitlines() if line.startswith("nightly"))
    assert "At 03:00 every day (Europe/Paris)" in line and " yes " in line and " UTC " in line
    paused = next(line for line in table.splitlines() if line.startswith("paused"))
    assert "Every minute" in paused and "  no  " in paused and "UTC" not in paused
    assert "not registered" in next(
        line for line in table.splitlines() if line.startswith("orphan")
    )
    assert "1 enabled schedule(s) broken" in table
    out = StringIO()
    call_command("pgqueue_status", "--json", stdout=out)
    schedules = {s["name"]: s for s in json.loads(out.getvalue())["schedules"]}
    assert schedules["nightly"]["enabled"] is True and schedules["nightly"]["next_run_at"]
    assert schedules["paused"]["next_run_at"] is None
    assert "not registered" in schedules["orphan"]["broken"]
    assert schedules["nightly"]["source"] == "admin"


def test_a_worker_dying_mid_firing_neither_loses_nor_doubles_the_tick():
    """Worker A locks the due schedule and inserts the tick's job, then its session dies before
    committing (its backend is terminated). While A has the row locked, another firing skips it
    (no double); once A is gone its job is rolled back and the tick fires once."""
    from django_pgqueue.sql import schedules as sql

    schedule = make(job=NOOP, every=60, next_run_at=at(2026, 1, 1))
    now = at(2026, 1, 1, 0, 0, 1)
    dying = QueueConnection("default", "dying firer")
    raw = dying.raw
    raw.execute("BEGIN")
    assert raw.execute(sql.LOCK_DUE, [now, 10]).fetchall()
    raw.execute(
        sql.INSERT_TICKS,
        ["default", 0, 5, None, None, None, None, False, [at(2026, 1, 1)], schedule.pk],
    )
    pid = raw.info.backend_pid
    assert fire(now).enqueued == 0  # locked by A: skipped, not doubled
    killer = QueueConnection("default", "killer")
    with killer.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

    def gone() -> bool:  # the signal is sent at once; the backend (and its locks) end soon
        with killer.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            return cursor.fetchone()[0] == 0

    wait_until(gone, timeout=30)
    killer.close()
    dying.close()
    assert fire(now).enqueued == 1  # A's insert rolled back with it: the tick fires once
    assert ticks() == [at(2026, 1, 1)]
    assert Schedule.objects.get().next_run_at == at(2026, 1, 1, 0, 1)


def test_ticks_of_a_rate_limited_job_keep_its_limit():
    """Ticks were once inserted without the job's rate key: one claim started them all."""
    now = timezone.now()
    make(
        "rated",
        job="tests.testapp.jobs.charge",  # rate_limit="10/s", rate_key="stripe"
        args=[1],
        every=1.0,
        catch_up=True,
        next_run_at=now - timedelta(seconds=30),
    )
    assert fire(now).enqueued > 10
    Schedule.objects.get(name="rated").run_now()
    assert set(Job.objects.values_list("rate_key", flat=True)) == {"stripe"}
    assert len(Job.objects.claim("test", limit=100)) == 10
