"""The per-queue numbers (``django_pgqueue.stats``) and ``manage.py pgqueue_status``.

The million-row measurement at the end runs only with ``PGQUEUE_MEASURE=1`` (see docs/admin.md).
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import stats
from django_pgqueue.models import Job, Worker
from django_pgqueue.sql import stats as stats_sql

pytestmark = pytest.mark.django_db

ADD = "tests.testapp.jobs.add"


def make(status: str = "pending", **fields) -> Job:
    now = timezone.now()
    values: dict = {"name": ADD, "queue": "default", "status": status}
    if status in ("completed", "dead", "cancelled"):
        values.update(attempts=1, started_at=now, finished_at=now)
    if status == "running":
        values.update(attempts=1, locked_at=now, locked_by="w", started_at=now)
    values.update(fields)
    return Job.objects.create(**values)


def error(at, attempt: int = 1) -> dict:
    return {
        "attempt": attempt,
        "worker_id": "w",
        "exception_class": "builtins.ValueError",
        "traceback": "ValueError: no",
        "at": at.isoformat(),
    }


def analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgqueue_job")


@pytest.fixture
def big_table(monkeypatch):
    """Make stats treat the (small) test table as a big one: capped counts and estimates."""
    monkeypatch.setattr(stats.limits, "EXACT_TABLE_BYTES", 0)


# ----- counts ------------------------------------------------------------------------------


def test_exact_counts_per_queue_on_a_small_table():
    now = timezone.now()
    make("pending", run_after=now - timedelta(minutes=10), priority=-5)
    make("pending", run_after=now - timedelta(minutes=1), priority=50)
    make("pending", run_after=now + timedelta(hours=1))
    make("running")
    make("completed")
    make("dead")
    make("dead", queue="emails")
    make("cancelled")
    report = stats.queue_report()
    assert report.exact
    default = report.queue("default")
    assert [str(c) for c in (default.runnable, default.scheduled, default.running)] == [
        "2",
        "1",
        "1",
    ]
    assert (default.completed, default.dead) == (stats.Count(1), stats.Count(1))
    # The oldest runnable job whatever its priority: the one waiting for ten minutes.
    assert timedelta(minutes=10) <= default.oldest_runnable_age < timedelta(minutes=11)
    assert report.queue("emails").dead == stats.Count(1)
    assert default.pending == stats.Count(3)


def test_queues_of_registered_jobs_and_workers_are_listed_even_when_empty():
    Worker.objects.create(worker_id="w1", hostname="h", pid=1, queues=["reports"], threads=2)
    report = stats.queue_report()
    names = [q.queue for q in report.queues]
    # "emails" comes from @job(queue="emails"), "reports" from a live worker.
    assert names == ["default", "emails", "reports"]
    assert report.queue("reports").runnable == stats.Count(0)
    assert report.queue("reports").oldest_runnable_age is None


def test_capped_counts_and_estimates_on_a_big_table(big_table, monkeypatch):
    monkeypatch.setattr(stats.limits, "COUNT_CAP", 3)
    for _ in range(2):
        make("dead", queue="emails")
    for _ in range(8):
        make("dead")
    for _ in range(5):
        make("completed")
    make("pending", run_after=timezone.now() - timedelta(seconds=30))
    analyze()
    report = stats.queue_report()
    assert not report.exact
    default = report.queue("default")
    # Over the cap: the planner's number (it assumes queue and status are independent).
    assert default.dead.kind == "estimate" and 6 <= default.dead.value <= 11
    assert str(default.dead) == f"~{default.dead.value}"
    assert report.queue("emails").dead == stats.Count(2)  # under the cap: exact
    assert default.runnable == stats.Count(1)
    assert default.completed.kind == "estimate" and 3 <= default.completed.value <= 7
    assert 25 <= default.oldest_runnable_age.total_seconds() < 90
    # Queues are found through the partial indexes, the statistics and the registry.
    assert {q.queue for q in report.queues} == {"default", "emails"}


def test_a_count_over_the_cap_never_shows_less_than_the_cap(big_table, monkeypatch):
    monkeypatch.setattr(stats.limits, "COUNT_CAP", 3)
    for _ in range(6):
        make("dead")
    # No ANALYZE: whatever the statistics say, the count says "at least the cap".
    count = stats.queue_report().queue("default").dead
    assert count.value >= 3 and not count.exact


def test_count_display():
    assert str(stats.Count(1234)) == "1,234"
    assert str(stats.Count(10_000, "at_least")) == "10,000+"
    assert str(stats.Count(1_234_567, "estimate")) == "~1,200,000"
    assert str(stats.Count(42, "estimate")) == "~42"
    assert stats.Count(5, "estimate").note.startswith("PostgreSQL's estimate")
    assert stats.Count(5).note == ""


def test_capped_count_of_a_queryset(monkeypatch):
    for _ in range(4):
        make("completed")
    qs = Job.objects.all()
    assert stats.capped_count(qs, cap=10) == stats.Count(4)
    analyze()
    assert stats.capped_count(qs, cap=2) == stats.Count(4, "estimate")
    assert stats.estimate_rows(qs.filter(status="completed")) == 4


# ----- the last hour -----------------------------------------------------------------------


def test_throughput_and_failures_over_the_last_hour():
    now = timezone.now()
    make("completed", finished_at=now - timedelta(seconds=10))
    make("completed", finished_at=now - timedelta(minutes=5))
    make("completed", finished_at=now - timedelta(hours=2))  # outside the hour
    # A job that failed twice and then completed: two failed attempts and one completion.
    make(
        "completed",
        queue="emails",
        finished_at=now - timedelta(minutes=30),
        errors=[error(now - timedelta(minutes=40)), error(now - timedelta(minutes=35), 2)],
    )
    make("dead", finished_at=now - timedelta(minutes=2), errors=[error(now - timedelta(minutes=2))])
    # Pending, waiting for its retry: its failure counts too.
    make(
        "pending", run_after=now + timedelta(minutes=1), errors=[error(now - timedelta(minutes=1))]
    )
    # Pending and due again (its ready row in the ring, not the later partition): counts too.
    make(
        "pending", run_after=now - timedelta(seconds=5), errors=[error(now - timedelta(minutes=3))]
    )
    # An old failure of a job that is running again now does not count.
    make("running", attempts=2, errors=[error(now - timedelta(hours=3))])
    report = stats.queue_report()
    default = report.queue("default")
    assert default.completed_last_minute == stats.Count(1)
    assert default.completed_last_hour == stats.Count(2)
    assert default.failed_last_hour == stats.Count(3)
    emails = report.queue("emails")
    assert (emails.completed_last_hour.value, emails.failed_last_hour.value) == (1, 2)
    minutes = report.minutes
    assert len(minutes) == 60 and minutes[-1].start > minutes[0].start
    assert sum(m.completed for m in minutes) == 3
    assert sum(m.failed for m in minutes) == 5
    assert minutes[-1].completed == 1  # the last minute
    assert minutes[-6].completed == 1  # five minutes ago
    assert minutes[-41].failed == 1  # forty minutes ago
    assert not report.window_capped


def test_the_last_hour_reads_at_most_window_cap_rows(monkeypatch):
    monkeypatch.setattr(stats.limits, "WINDOW_CAP", 3)
    now = timezone.now()
    for minutes_ago in (0, 0, 1, 20, 40):
        make("completed", finished_at=now - timedelta(minutes=minutes_ago, seconds=5))
    report = stats.queue_report()
    assert report.window_capped
    default = report.queue("default")
    assert default.completed_last_hour == stats.Count(3, "at_least")
    assert default.completed_last_minute == stats.Count(2)  # the newest rows were all read
    # The oldest row read finished in minute 1: minute 0 is whole, minute 1 may be cut.
    assert [m.complete for m in report.minutes][-3:] == [False, False, True]
    assert not report.minutes[0].complete


def test_workers_seen_recently_and_their_state():
    now = timezone.now()
    Worker.objects.create(worker_id="live", hostname="a", pid=1, queues=[], threads=4)
    Worker.objects.create(
        worker_id="gone", hostname="b", pid=2, last_seen_at=now - timedelta(minutes=10)
    )
    Worker.objects.create(
        worker_id="done", hostname="c", pid=3, stopped_at=now, queues=["emails"], threads=2
    )
    Worker.objects.create(
        worker_id="old", hostname="d", pid=4, last_seen_at=now - timedelta(hours=2)
    )
    report = stats.queue_report()
    assert [(w.worker_id, w.state) for w in report.workers] == [
        ("live", "running"),
        ("done", "stopped"),
        ("gone", "lost"),
    ]
    # The live worker serves every queue ([] means all).
    assert (report.queue("emails").workers, report.queue("emails").threads) == (1, 4)


def test_queue_and_job_names_for_the_filters(big_table):
    for _ in range(3):
        make("dead", queue="q-dead", name="old.module.gone")
    make("pending", queue="q-pending")
    assert {"default", "emails", "q-dead", "q-pending"} <= set(stats.queue_names())
    assert ADD in stats.job_names()
    # A name only in the table is found once the statistics know it.
    analyze()
    assert "old.module.gone" in stats.job_names()


def test_big_table_queries_can_use_the_partial_indexes():
    """With sequential scans priced out, every stats query is answered from the indexes: the
    WHERE clauses imply the partial indexes' predicates. None reads the job table's index of
    pending jobs (pending jobs are counted from their ready rows), and the running count
    reads the running-jobs index by a range of ``locked_at`` (the fresh locks)."""
    make("completed")
    params = {"queues": ["default"], "cap": 10, "fresh": 60.0}
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for sql in (
            stats_sql.CAPPED_COUNTS,
            stats_sql.RUNNING_COUNTS,
            stats_sql.LAST_HOUR,
            *stats_sql.LOOSE_QUEUES,
        ):
            cursor.execute("EXPLAIN " + sql, params if "%(" in sql else None)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Seq Scan on pgqueue_job" not in plan, plan
            assert "pgqueue_job_claim_queue" not in plan, plan
        cursor.execute("EXPLAIN " + stats_sql.RUNNING_COUNTS, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "pgqueue_job_stale" in plan and "locked_at >=" in plan, plan
        for name, index in [
            ("RUNNABLE", "pgqueue_ready_"),
            ("SCHEDULED", "pgqueue_ready_"),
            ("DEAD", "pgqueue_job_dead"),
            ("WAITING", "pgqueue_job_waiting"),
        ]:
            where = getattr(stats_sql, name)
            cursor.execute("EXPLAIN " + stats_sql.select_where(where), ["default"])
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert index in plan, plan


# ----- the command -------------------------------------------------------------------------


def run_status(*args: str) -> str:
    out = StringIO()
    call_command("pgqueue_status", *args, stdout=out)
    return out.getvalue()


def test_pgqueue_status_prints_a_table():
    make("pending", run_after=timezone.now() - timedelta(minutes=2))
    make("dead", queue="emails")
    make("completed", finished_at=timezone.now())
    lines = run_status().splitlines()
    header = lines[0].split()
    assert header[:6] == ["QUEUE", "RUNNABLE", "SCHEDULED", "RUNNING", "COMPLETED", "DEAD"]
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows["default"][1:6] == ["1", "0", "0", "1", "0"]
    assert rows["default"][6].startswith("2m")  # oldest runnable
    assert rows["default"][8] == "1"  # completed in the last hour
    assert rows["emails"][5] == "1"
    assert "Workers running: 0" in lines[-1]


def test_pgqueue_status_json_and_queue_option(big_table, monkeypatch):
    monkeypatch.setattr(stats.limits, "COUNT_CAP", 1)
    make("dead")
    make("dead")
    make("dead", queue="emails")
    analyze()
    data = json.loads(run_status("--json", "--queue", "default"))
    assert [q["queue"] for q in data["queues"]] == ["default"]
    default = data["queues"][0]
    assert default["dead"] == 2 and default["approximate"]["dead"] == "estimate"
    assert default["approximate"]["completed"] == "estimate"
    assert "runnable" not in default["approximate"]
    assert data["exact"] is False and len(data["last_hour"]) == 60
    assert "~ estimate from table statistics" in run_status()


# ----- the million-row measurement (opt-in) ----------------------------------------------

MEASURE = os.environ.get("PGQUEUE_MEASURE") == "1"


def _fill(rows: int, spread: str) -> None:
    """``rows`` completed jobs finished over ``spread`` (an interval), plus a realistic rest."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO pgqueue_job (queue, name, args, status, attempts, created_at,
                                     started_at, finished_at, run_after, result)
            SELECT CASE WHEN mod(g, 10) = 0 THEN 'emails' ELSE 'default' END,
                   CASE WHEN mod(g, 10) = 0 THEN 'tests.testapp.jobs.send_welcome'
                        ELSE 'tests.testapp.jobs.add' END,
                   jsonb_build_array(g, mod(g, 97)), 'completed', 1, t, t, t + interval '20 ms',
                   t, to_jsonb(g)
            FROM generate_series(1, %s) g,
                 LATERAL (SELECT now() - (interval '{spread}' * g / %s) AS t) x
            """,
            [rows, rows],
        )
        cursor.execute(
            """
            INSERT INTO pgqueue_job (queue, name, args, status, attempts, max_attempts,
                                     finished_at, last_error, errors)
            SELECT CASE WHEN g % 3 = 0 THEN 'emails' ELSE 'default' END,
                   'tests.testapp.jobs.always_fails', jsonb_build_array('boom ' || g), 'dead',
                   3, 3, now() - g * interval '7 seconds', 'RuntimeError: boom ' || g,
                   jsonb_build_array(jsonb_build_object('attempt', 3, 'worker_id', 'w',
                       'exception_class', 'builtins.RuntimeError', 'traceback', 'boom',
                       'at', now() - g * interval '7 seconds'))
            FROM generate_series(1, 500) g;
            INSERT INTO pgqueue_job (queue, name, args, status, run_after, priority)
            SELECT 'default', 'tests.testapp.jobs.add', jsonb_build_array(g, 1), 'pending',
                   now() + (g - 200) * interval '1 second', (g % 3) * 10
            FROM generate_series(1, 300) g;
            -- A rare queue: filtering on it reads the table (no index leads with queue).
            INSERT INTO pgqueue_job (queue, name, status, attempts, finished_at)
            SELECT 'reports', 'tests.testapp.jobs.noop', 'completed', 1, now()
            FROM generate_series(1, 10) g;
            """
        )


def _time(client: Client, url: str, runs: int = 5) -> float:
    client.get(url)  # warm up
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url)
        best = min(best, time.perf_counter() - started)
        assert response.status_code == 200
    return best


@pytest.mark.skipif(not MEASURE, reason="set PGQUEUE_MEASURE=1 to measure with 1,000,000 rows")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("spread", ["7 days", "1 hour"])
def test_measure_render_times_with_a_million_rows(django_user_model, spread):
    rows = int(os.environ.get("PGQUEUE_MEASURE_ROWS", "1000000"))
    _fill(rows, spread)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE pgqueue_job")
    user = django_user_model.objects.create_superuser("m", "m@example.com", "pw")
    client = Client()
    client.force_login(user)
    changelist = reverse("admin:django_pgqueue_job_changelist")
    pages = {
        "dashboard": reverse("admin:django_pgqueue_job_dashboard"),
        "changelist": changelist,
        "changelist ?status=dead": changelist + "?status=dead",
        "changelist ?status=pending": changelist + "?status=pending",
        "changelist ?queue=emails (10% of rows)": changelist + "?queue=emails",
        "changelist ?queue=reports (10 rows)": changelist + "?queue=reports",
        "changelist ?q=boom 42 (search)": changelist + "?q=boom+42",
        "job detail": reverse(
            "admin:django_pgqueue_job_change",
            args=[Job.objects.filter(status="dead").values_list("pk", flat=True).first()],
        ),
    }
    started = time.perf_counter()
    report = stats.queue_report()
    collect = time.perf_counter() - started
    print(f"\n{rows:,} completed rows finished over the last {spread}:")
    print(f"  stats.queue_report(): {collect * 1000:.0f} ms")
    for label, url in pages.items():
        print(f"  {label}: {_time(client, url) * 1000:.0f} ms")
    out = StringIO()
    call_command("pgqueue_status", stdout=out)
    print(out.getvalue())
    with connection.cursor() as cursor:
        cursor.execute("SET jit = off")  # as queue_report() runs them
        for name, sql in (
            ("capped counts", stats_sql.CAPPED_COUNTS),
            ("last hour", stats_sql.LAST_HOUR),
        ):
            params = {"queues": ["default", "emails"], "cap": stats.limits.COUNT_CAP + 1}
            if name == "last hour":
                params = {"cap": stats.limits.WINDOW_CAP, "fresh": 60.0}
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            print(f"--- EXPLAIN (ANALYZE, BUFFERS): {name}\n{plan}")
    assert not report.exact
