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
from django_pgqueue.models import Job, Worker
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


# ----- the gauges against the job table ---------------------------------------------------


def _gauges() -> dict:
    client = Client()
    client.force_login(staff(permission=True))
    response = client.get(URL)
    assert response.status_code == 200
    return samples(response.content.decode())


def _truth(queue: str, now) -> dict[str, int]:
    """What the job table says of ``queue`` at ``now``, per ``status`` label of the gauge: a
    running job counts while its lock is fresh (docs/monitoring.md)."""
    from django_pgqueue.conf import settings

    jobs_of = Job.objects.filter(queue=queue)
    fresh = now - timedelta(seconds=settings.VISIBILITY_TIMEOUT)
    return {
        "runnable": jobs_of.filter(status="pending", run_after__lte=now).count(),
        "scheduled": jobs_of.filter(status="pending", run_after__gt=now).count(),
        "running": jobs_of.filter(status="running", locked_at__gte=fresh).count(),
        "dead": jobs_of.filter(status="dead").count(),
        "waiting": jobs_of.filter(status="waiting").count(),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("table", ["small", "big"])
def test_the_gauges_equal_what_the_job_table_says(table, monkeypatch):
    """In every state a job waits in, on the exact path (a small table) and the capped one
    (pending jobs counted from their ready rows): runnable jobs whose ready rows are not in
    the ring (a paused queue's, parked; a busy key's backlog, held; a job due whose row is
    still in the later partition), scheduled, running (claimed by the real claim), lost
    (its lock expired: not counted), waiting for a parent, dead, completed."""
    from django_pgqueue import operations
    from django_pgqueue.queues import pause_queue
    from tests.testapp import jobs
    from tests.utils import claim_rows, finish_completed, ready_rows, wait_until

    if table == "big":
        monkeypatch.setattr(stats.limits, "EXACT_TABLE_BYTES", 0)
    db = operations.DjangoDatabase("default")

    def claim(queue: str, limit: int) -> list[Job]:
        # reclaim=False: no promotion of due later rows, no stale job taken back.
        return claim_rows(db, limit, [queue], reclaim=False)[0]

    jobs.add.using(queue="work").enqueue_many([(1, 1)] * 5)
    running = claim("work", 3)
    lost = running.pop()
    Job.objects.filter(pk=lost.pk).update(locked_at=timezone.now() - timedelta(minutes=5))
    finish_completed(claim("work", 1))  # completed: counted nowhere
    jobs.add.using(queue="done").enqueue_many([(1, 1)] * 2)
    finish_completed(claim("done", 2))

    jobs.add.enqueue_many([(1, 2)] * 3)
    jobs.add.using(run_after=timedelta(hours=1)).enqueue_many([(1, 3)] * 2)
    make("dead")
    parent = jobs.add.using(queue="flow").enqueue(1, 4)
    jobs.add.using(queue="flow", after=[parent]).enqueue(1, 5)

    jobs.add.using(queue="paused").enqueue_many([(1, 6)] * 2)
    pause_queue("paused")  # its rows move to the parked partition
    jobs.add.using(queue="paused").enqueue(1, 7)  # in the ring until an upkeep parks it

    jobs.noop.using(queue="keys", concurrency_key="k").enqueue()
    assert len(claim("keys", 10)) == 1
    jobs.noop.using(queue="keys", concurrency_key="k").enqueue_many([()] * 40)
    operations.sweep_held(db)

    soon = jobs.add.using(run_after=timedelta(seconds=0.3)).enqueue(1, 8)
    wait_until(lambda: timezone.now() > soon.run_after + timedelta(milliseconds=50))

    # Where the ready rows are: read by slot, a paused queue's jobs and a busy key's backlog
    # would not be runnable, and the due job still in the later partition would be scheduled.
    where = ready_rows("queue")
    assert where[("paused", "parked")] == 2 and where[("paused", "ring")] == 1
    assert where[("keys", "held")] > 0 and where[("default", "later")] == 3
    assert Job.objects.get(pk=lost.pk).status == "running"

    before = timezone.now()
    found = _gauges()
    after = timezone.now()
    queues = ["default", "work", "done", "flow", "paused", "keys"]
    for queue in queues:
        # The truth at both ends of the request: no job here changes state in between.
        assert _truth(queue, before) == _truth(queue, after)
        # A queue with nothing to count may have no series on a big table (it is found
        # through the indexes and the statistics): as good as zeros.
        gauges = {
            status: found.get(("pgqueue_queue_jobs", (("queue", queue), ("status", status))), 0)
            for status in _truth(queue, before)
        }
        assert gauges == _truth(queue, before), queue
    assert _truth("work", before)["running"] == 2  # the lost job is not among them
    assert _truth("default", before) == {
        "runnable": 4,
        "scheduled": 2,
        "running": 0,
        "dead": 1,
        "waiting": 0,
    }
    assert _truth("paused", before)["runnable"] == 3 and _truth("keys", before)["runnable"] == 40
    assert _truth("flow", before)["waiting"] == 1
    assert found[("pgqueue_queue_counts_exact", ())] == (1 if table == "small" else 0)

    # The oldest runnable job of the paused queue waits in the parked partition.
    oldest = Job.objects.filter(queue="paused").order_by("run_after").first().run_after
    age = found[("pgqueue_queue_oldest_runnable_age_seconds", (("queue", "paused"),))]
    assert (before - oldest).total_seconds() <= age <= (after - oldest).total_seconds()
    # Completed jobs show in no gauge; the dashboard counts them (exactly on a small table).
    report = stats.queue_report()
    assert report.queue("done").completed.value == (2 if table == "small" else 0) or (
        table == "big" and report.queue("done").completed.kind == "estimate"
    )


def test_running_counts_past_the_cap_are_lower_bounds(monkeypatch):
    monkeypatch.setattr(stats.limits, "EXACT_TABLE_BYTES", 0)
    monkeypatch.setattr(stats.limits, "COUNT_CAP", 2)
    for _ in range(3):
        make("running")
    running = stats.queue_report().queue("default").running
    assert running.kind == "at_least" and running.value >= 2


# ----- the million-row measurement (PGQUEUE_MEASURE=1; docs/performance.md, "The web view") ----


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


def _queries(client: Client) -> str:
    """The statements one GET runs, each with its time (Django's own measure)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    return "\n".join(
        f"    {float(q['time']) * 1000:6.1f} ms  {' '.join(q['sql'].split())[:110]}"
        for q in captured.captured_queries
    )


def _statements() -> list[tuple[str, str, dict]]:
    """Each statement the snapshot of a big table runs, with its parameters."""
    from django_pgqueue.conf import settings
    from django_pgqueue.sql import stats as stats_sql

    queues = {"queues": ["default", "emails"], "cap": stats.limits.COUNT_CAP + 1}
    found = []
    for name in ("CAPPED_COUNTS", "RUNNING_COUNTS", "RUNNING_QUEUES"):
        if hasattr(stats_sql, name):
            params = dict(queues, fresh=settings.VISIBILITY_TIMEOUT)
            found.append((name, getattr(stats_sql, name), params))
    for n, statement in enumerate(stats_sql.LOOSE_QUEUES):
        found.append((f"LOOSE_QUEUES[{n}]", statement, {}))
    return found


def _explain(label: str) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) of each statement: the plans, and a line per statement with
    its time and buffers."""
    import re

    from django.db import connection

    summary = []
    with connection.cursor() as cursor:
        cursor.execute("SET jit = off")  # as the snapshot runs them
        for name, statement, params in _statements():
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params or None)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            if os.environ.get("PGQUEUE_MEASURE_PLANS") == "1":
                print(f"--- {name}\n{plan}")
            buffers = re.search(r"Buffers: ([^\n]*)", plan)
            took = re.search(r"Execution Time: ([\d.]+) ms", plan)
            planning = re.search(r"Planning Time: ([\d.]+) ms", plan)
            fetches = sum(int(n) for n in re.findall(r"Heap Fetches: (\d+)", plan))
            summary.append(
                f"  {name}: {took.group(1) if took else '?'} ms "
                f"(planning {planning.group(1) if planning else '?'} ms), "
                f"{buffers.group(1) if buffers else 'no buffers'}, heap fetches {fetches}"
            )
    print(f"{label}:")
    print("\n".join(summary))
    if os.environ.get("PGQUEUE_MEASURE_QUERIES") == "1":
        from django.test import Client as _Client

        print("  one GET's statements:\n" + _queries(_Client()))


def _churn(jobs: int) -> None:
    """``jobs`` jobs enqueued and taken through pending -> running -> completed by the real
    statements, as a worker would: ``enqueue_many``, the claim, the outcome, and the ring's
    recycling between rounds (on a worker's connection)."""
    from django_pgqueue import operations
    from django_pgqueue.worker.connection import QueueConnection
    from tests.testapp import jobs as testjobs
    from tests.utils import claim_and_finish_all

    queue_connection = QueueConnection("default", "pgqueue measure churn")
    try:
        done = 0
        while done < jobs:
            step = min(8192, jobs - done)
            testjobs.noop.enqueue_many([()] * step)
            claim_and_finish_all(queue_connection, queues=["default"])
            operations.recycle(queue_connection)
            done += step
    finally:
        queue_connection.close()


def _sizes() -> str:
    """The size of the ready table's partitions, and of the job table's indexes the counts
    used to read (pages)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_relation_size(c.oid) / 8192 FROM pg_class c "
            "WHERE c.relname ~ '^pgqueue_ready_([0-7]|later|parked|held)$' "
            "   OR c.relname IN ('pgqueue_job_claim_queue', 'pgqueue_job_stale') ORDER BY 1"
        )
        return "pages: " + ", ".join(
            f"{name.removeprefix('pgqueue_')} {pages}" for name, pages in cursor.fetchall()
        )


def _server() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        values = []
        for setting in ("server_version", "shared_buffers", "autovacuum", "synchronous_commit"):
            cursor.execute(f"SHOW {setting}")
            values.append(f"{setting}={cursor.fetchone()[0]}")
    return ", ".join(values) + f", load average {os.getloadavg()}"


@pytest.mark.skipif(
    os.environ.get("PGQUEUE_MEASURE") != "1",
    reason="set PGQUEUE_MEASURE=1 to measure with 1,000,000 rows",
)
@pytest.mark.django_db(transaction=True)
@override_settings(PGQUEUE_METRICS_TOKEN=TOKEN)
def test_measure_the_view_on_a_million_rows_and_under_a_pinned_horizon():
    """The view's time on the million-row table of tests/test_status.py, vacuumed; then with
    a REPEATABLE READ transaction held open on another connection (the xmin horizon pinned:
    no vacuum may remove what the churn leaves) while 50,000, then 150,000 jobs in all go
    through pending -> running -> completed in the measured queue (and 300,000: the ring's
    dead entries stay bounded)."""
    import time

    from django.db import connection, connections

    from django_pgqueue.conf import settings
    from tests.test_status import _fill

    rows = int(os.environ.get("PGQUEUE_MEASURE_ROWS", "1000000"))
    _fill(rows, "7 days")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE pgqueue_job")
    client = Client()
    print(f"\n{_server()}")
    print(f"{rows:,} rows, vacuumed: GET {URL} best of 7 {_best_ms(client):.1f} ms")
    _explain("  statements")
    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("SELECT count(*) FROM pgqueue_worker")
        churned = 0
        for total in (50_000, 150_000, 300_000):
            _churn(total - churned)
            churned = total
            with connection.cursor() as cursor:
                cursor.execute("VACUUM pgqueue_job")  # removes nothing the held snapshot may see
            ended = time.monotonic()
            print(f"pinned horizon, {total:,} churned: GET {URL} best {_best_ms(client):.1f} ms")
            print(f"  {_sizes()}")
            _explain("  statements")
        # The running-jobs count reads the locks of the last visibility timeout: once the
        # churn's are older, what the view reads no longer depends on it.
        timeout = 5.0
        with override_settings(PGQUEUE_VISIBILITY_TIMEOUT=timeout):
            time.sleep(max(0.0, ended + timeout + 1 - time.monotonic()))
            print(
                f"pinned horizon, {churned:,} churned, {timeout:.0f} s later "
                f"(PGQUEUE_VISIBILITY_TIMEOUT={settings.VISIBILITY_TIMEOUT:.0f}): "
                f"GET {URL} best {_best_ms(client):.1f} ms"
            )
            _explain("  statements")
    finally:
        holder.close()
