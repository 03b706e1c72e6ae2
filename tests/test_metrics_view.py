"""``GET /pgqueue/metrics`` (django_pgqueue.urls): the queues' gauges, for whom they are for."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_pgqueue import stats
from django_pgqueue.models import Worker
from tests.test_status import make

pytestmark = pytest.mark.django_db

URL = "/pgqueue/metrics"
TOKEN = "s3cret-token"


def samples(text: str) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def staff(*, permission: bool) -> User:
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    if permission:
        user.user_permissions.add(Permission.objects.get(codename="view_job"))
    return user


def a_queue() -> None:
    now = timezone.now()
    for _ in range(3):
        make("pending", run_after=now - timedelta(minutes=5))
    make("pending", run_after=now + timedelta(hours=1))
    make("running")
    make("dead", queue="emails")
    Worker.objects.create(
        worker_id="w1", hostname="h", pid=1, queues=[], threads=2, last_seen_at=now
    )


@override_settings(PGQUEUE_METRICS_TOKEN=TOKEN)
def test_only_staff_with_the_view_permission_or_the_token_read_it():
    client = Client()
    anonymous = client.get(URL)
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    assert client.get(URL, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get(URL, headers={"Authorization": "Bearer "}).status_code == 401
    assert client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200

    client.force_login(staff(permission=False))
    assert client.get(URL).status_code == 403
    # A staff session with a wrong token is still refused: a token given is a token checked.
    assert client.get(URL, headers={"Authorization": "Bearer wrong"}).status_code == 401

    User.objects.all().delete()
    client.force_login(staff(permission=True))
    assert client.get(URL).status_code == 200
    assert client.post(URL).status_code == 405


def test_no_token_setting_lets_no_bearer_in():
    response = Client().get(URL, headers={"Authorization": "Bearer None"})
    assert response.status_code == 401


def test_the_gauges_say_what_the_dashboard_says():
    a_queue()
    client = Client()
    client.force_login(staff(permission=True))
    response = client.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    found = samples(response.content.decode())

    def jobs(queue: str, status: str) -> float:
        return found[("pgqueue_queue_jobs", (("queue", queue), ("status", status)))]

    assert jobs("default", "runnable") == 3
    assert jobs("default", "scheduled") == 1
    assert jobs("default", "running") == 1
    assert jobs("default", "dead") == 0
    assert jobs("emails", "dead") == 1
    age = found[("pgqueue_queue_oldest_runnable_age_seconds", (("queue", "default"),))]
    assert 5 * 60 <= age < 3600
    assert found[("pgqueue_queue_oldest_runnable_age_seconds", (("queue", "emails"),))] == 0
    assert found[("pgqueue_workers_alive", ())] == 1
    assert found[("pgqueue_queue_counts_exact", ())] == 1


def test_on_a_big_table_the_counts_are_the_capped_ones(monkeypatch):
    monkeypatch.setattr(stats.limits, "EXACT_TABLE_BYTES", 0)
    a_queue()
    client = Client()
    client.force_login(staff(permission=True))
    found = samples(client.get(URL).content.decode())
    assert found[("pgqueue_queue_jobs", (("queue", "default"), ("status", "runnable")))] == 3
    assert found[("pgqueue_queue_counts_exact", ())] == 0


# ----- the million-row measurement (PGQUEUE_MEASURE=1; docs/performance.md, "Metrics") --------


def _best_ms(client: Client, runs: int = 7) -> float:
    import time

    client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})  # warm up
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
        best = min(best, time.perf_counter() - started)
        assert response.status_code == 200
    return best * 1000


def _explain() -> str:
    from django.db import connection

    from django_pgqueue.sql import stats as stats_sql

    with connection.cursor() as cursor:
        cursor.execute("SET jit = off")
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS) " + stats_sql.CAPPED_COUNTS,
            {"queues": ["default", "emails"], "cap": stats.limits.COUNT_CAP + 1},
        )
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.skipif(
    os.environ.get("PGQUEUE_MEASURE") != "1",
    reason="set PGQUEUE_MEASURE=1 to measure with 1,000,000 rows",
)
@pytest.mark.django_db(transaction=True)
@override_settings(PGQUEUE_METRICS_TOKEN=TOKEN)
def test_measure_the_view_on_a_million_rows_and_under_a_pinned_horizon():
    from django.db import connection, connections

    from tests.test_status import _fill

    rows = int(os.environ.get("PGQUEUE_MEASURE_ROWS", "1000000"))
    _fill(rows, "7 days")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE pgqueue_job")
    client = Client()
    print(f"\n{rows:,} rows: GET {URL} best {_best_ms(client):.1f} ms")
    print(_explain())
    # A transaction held open on another connection pins the xmin horizon; meanwhile 50,000
    # jobs go through pending -> running -> completed in the measured queue, leaving dead
    # index entries no vacuum may remove.
    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("SELECT count(*) FROM pgqueue_worker")
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO pgqueue_job (queue, name, status, run_after) "
                "SELECT 'default', 'tests.testapp.jobs.add', 'pending', now() - interval '1 s' "
                "FROM generate_series(1, 50000)"
            )
            for status in ("running", "completed"):
                cursor.execute(
                    "UPDATE pgqueue_job SET status = %s, finished_at = "
                    "CASE WHEN %s = 'completed' THEN now() END, locked_by = 'w', "
                    "locked_at = now(), started_at = now(), attempts = 1 "
                    "WHERE id > (SELECT max(id) - 50000 FROM pgqueue_job)",
                    [status, status],
                )
            cursor.execute("VACUUM pgqueue_job")  # removes nothing the held snapshot may see
        print(f"pinned horizon, 50,000 churned: GET {URL} best {_best_ms(client):.1f} ms")
        print(_explain())
    finally:
        holder.close()
