"""Periodic schedules fired by real ``run_jobs`` worker subprocesses."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from django_pgqueue.models import Job, Schedule, Worker
from django_pgqueue.states import JobStatus
from tests.utils import start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

DECLARED = "tests.scheduleapp.jobs.every_two_seconds"
DECLARED_ASYNC = "tests.scheduleapp.jobs.every_two_seconds_async"


def schedule_env(**extra: str):
    return worker_env(DJANGO_SETTINGS_MODULE="tests.schedule_settings", **extra)


def jobs_of(name: str) -> list[Job]:
    return list(Job.objects.filter(schedule=name).order_by("run_after"))


def test_three_workers_for_ten_seconds_enqueue_one_job_per_two_second_tick():
    """@job(every=timedelta(seconds=2)) declared in code, three workers: the schedule is synced
    at their start, and over 10 s its ticks make 5 +- 1 jobs, never two for the same tick."""
    workers = [start_worker("--threads", "2", env=schedule_env()) for _ in range(3)]
    try:
        wait_until(lambda: Worker.objects.filter(stopped_at=None).count() >= 3, timeout=120)
        first = wait_until(
            lambda: Job.objects.filter(schedule=DECLARED).order_by("run_after").first(), timeout=60
        )
        window_end = first.run_after + timedelta(seconds=10)
        while timezone.now() < window_end + timedelta(seconds=1):
            time.sleep(0.2)
    finally:
        logs = [stop(w) for w in workers]
    schedule = Schedule.objects.get(name=DECLARED)
    assert (schedule.source, schedule.every, schedule.args) == ("code", 2.0, ["tick"])
    jobs = [j for j in jobs_of(DECLARED) if j.run_after < window_end]
    ticks = [j.run_after for j in jobs]
    assert len(ticks) == len(set(ticks)), f"a tick enqueued twice: {ticks}"
    assert 4 <= len(jobs) <= 6, (ticks, logs)
    assert all(t.timestamp() % 2 == 0 for t in ticks)
    # Ordinary jobs: the workers ran them.
    assert all(j.status == JobStatus.COMPLETED and j.result == "tick" for j in jobs[:-1])
    # The async def periodic job's ticks: stored as async, run on the workers' event loops.
    async_jobs = [j for j in jobs_of(DECLARED_ASYNC) if j.run_after < window_end]
    assert 4 <= len(async_jobs) <= 6, [j.run_after for j in async_jobs]
    assert all(j.is_async for j in async_jobs)
    assert all(
        j.status == JobStatus.COMPLETED and j.result == "async tick" for j in async_jobs[:-1]
    )
    # Each tick's job was logged by the one worker that enqueued it.
    fired = [
        log.count("Schedule 'tests.scheduleapp.jobs.every_two_seconds' enqueued") for log in logs
    ]
    assert sum(fired) >= len(jobs)


def test_a_cron_schedule_fires_at_its_time():
    """A seconds-field cron for one moment a few seconds ahead: a worker enqueues it then,
    not before, exactly once."""
    target = (timezone.now() + timedelta(seconds=6)).astimezone(UTC).replace(microsecond=0)
    cron = f"{target.second} {target.minute} {target.hour} {target.day} {target.month} *"
    Schedule.objects.create(
        name="once", job="tests.testapp.jobs.add", args=[2, 3], cron=cron, timezone="UTC"
    )
    worker = start_worker()
    try:
        job = wait_until(
            lambda: Job.objects.filter(schedule="once", status=JobStatus.COMPLETED).first(),
            timeout=60,
        )
        time.sleep(1.5)
    finally:
        log = stop(worker)
    assert job.run_after == target, log
    assert job.created_at >= target
    assert job.result == 5
    assert Job.objects.filter(schedule="once").count() == 1
    schedule = Schedule.objects.get(name="once")
    assert schedule.last_run_at == target and schedule.next_run_at > target


def test_disabling_a_schedule_stops_it_at_once():
    Schedule.objects.create(name="fast", job="tests.testapp.jobs.noop", every=1)
    worker = start_worker()
    try:
        wait_until(lambda: Job.objects.filter(schedule="fast").count() >= 2, timeout=60)
        Schedule.objects.filter(name="fast").disable()
        count = Job.objects.filter(schedule="fast").count()
        time.sleep(3)
        assert Job.objects.filter(schedule="fast").count() == count
        # Enabled again: it goes on from now (the disabled stretch is not "missed").
        Schedule.objects.filter(name="fast").enable()
        wait_until(lambda: Job.objects.filter(schedule="fast").count() > count, timeout=60)
    finally:
        stop(worker)
    assert Job.objects.filter(schedule="fast").count() <= count + 6


def test_a_worker_enqueues_the_latest_missed_tick_or_every_one_with_catch_up():
    hour_ago = timezone.now() - timedelta(hours=1)
    for name, catch_up in [("latest", False), ("all", True)]:
        Schedule.objects.create(
            name=name, job="tests.testapp.jobs.noop", every=60, catch_up=catch_up
        )
    first_tick = hour_ago.timestamp() // 60 * 60
    Schedule.objects.update(next_run_at=datetime.fromtimestamp(first_tick, UTC))
    started = time.time()
    worker = start_worker()
    try:
        wait_until(lambda: Job.objects.filter(schedule="all").count() >= 61, timeout=60)
        time.sleep(1)
    finally:
        log = stop(worker)
    ended = time.time()

    def ticks_due(at: float) -> int:
        return int((at - first_tick) // 60) + 1

    # A minute may turn while the worker runs: that tick is an ordinary one for both.
    turned = ticks_due(ended) - ticks_due(started)
    latest = Job.objects.filter(schedule="latest").count()
    assert 1 <= latest <= 1 + turned, log
    every = Job.objects.filter(schedule="all")
    assert ticks_due(started) <= every.count() <= ticks_due(ended)
    tick_times = sorted(j.run_after.timestamp() for j in every)
    assert tick_times == [first_tick + 60 * k for k in range(len(tick_times))]  # each tick once
    assert "missed" in log


def test_a_worker_started_with_no_schedules_fires_none():
    Schedule.objects.create(name="fast", job="tests.testapp.jobs.noop", every=1)
    quiet = start_worker("--no-schedules")
    try:
        wait_until(lambda: Worker.objects.filter(stopped_at=None).exists(), timeout=60)
        time.sleep(3)
        assert not Job.objects.filter(schedule="fast").exists()
    finally:
        stop(quiet)
    assert Schedule.objects.get().last_run_at is None
