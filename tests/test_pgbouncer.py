"""Through a real PgBouncer in transaction mode: enqueue, claim, run and the admin.

Debian's ``pgbouncer`` (1.18) runs in front of the test server (tests/pgbouncer.py). Workers
reach the test database through it with ``PGQUEUE_LISTEN = False`` (LISTEN needs a session);
the test's own Django connection is pointed at it for the enqueue and the admin pages.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from django_pgqueue.models import Job
from tests.testapp import jobs
from tests.utils import start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def bouncer_env(pgbouncer, **extra: str) -> dict[str, str]:
    return worker_env(
        PGHOST="127.0.0.1",
        PGPORT=str(pgbouncer.port),
        PGQUEUE_LISTEN="0",
        PGQUEUE_POLL_INTERVAL="0.2",
        PGQUEUE_HEARTBEAT_INTERVAL="0.5",
        **extra,
    )


@contextlib.contextmanager
def through(pgbouncer) -> Iterator[None]:
    """The test's Django connection goes through PgBouncer inside the block."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(pgbouncer.port))
    try:
        connection.ensure_connection()
        assert connection.connection.info.port == pgbouncer.port
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def recorded(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(line.split()[0] for line in path.read_text().splitlines())


def statuses() -> Counter[str]:
    return Counter(Job.objects.values_list("status", flat=True))


def test_enqueue_claim_run_and_admin_through_pgbouncer(pgbouncer, tmp_path):
    out = tmp_path / "out"
    with through(pgbouncer):
        jobs.record.enqueue(str(out), "one")
        jobs.record.enqueue_many([(str(out), f"many-{i}") for i in range(30)])
    proc = start_worker(
        "--processes", "2", "--threads", "2",
        env=bouncer_env(pgbouncer, PGQUEUE_PREPARED_STATEMENTS="0"),
    )  # fmt: skip
    try:
        wait_until(lambda: statuses() == Counter({"completed": 31}), timeout=120)
        with through(pgbouncer):
            jobs.record.enqueue_many([(str(out), f"later-{i}") for i in range(10)])
        wait_until(lambda: statuses() == Counter({"completed": 41}), timeout=120)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert "unreachable" not in log.lower() and "database error" not in log.lower(), log
    names = ["one"] + [f"many-{i}" for i in range(30)] + [f"later-{i}" for i in range(10)]
    assert recorded(out) == Counter(names)

    with through(pgbouncer):
        user = User.objects.create_superuser("bouncer", "b@example.com", "pw")
        client = Client()
        client.force_login(user)
        page = client.get("/admin/django_pgqueue/job/")
        assert page.status_code == 200
        assert "tests.testapp.jobs.record" in page.content.decode()
        dashboard = client.get("/admin/django_pgqueue/job/dashboard/")
        assert dashboard.status_code == 200
        # An admin action through the pooler: retry a job.
        done = Job.objects.filter(status="completed").first()
        Job.objects.filter(pk=done.pk).update(status="dead")
        response = client.post(
            "/admin/django_pgqueue/job/",
            {"action": "retry_jobs", "_selected_action": [done.pk]},
        )
        assert response.status_code in (200, 302)
        assert Job.objects.get(pk=done.pk).status == "pending"


def test_prepared_statements_behind_pgbouncer_turn_themselves_off(pgbouncer, tmp_path):
    """PgBouncer 1.18 in transaction mode hands each statement to any server connection: a
    statement prepared on one is missing (or another's) on the next. The worker notices it is
    behind a pooler, says so, and runs without them: nothing hangs, nothing fails."""
    out = tmp_path / "out"
    jobs.record.enqueue_many([(str(out), f"job-{i}") for i in range(40)])
    proc = start_worker(
        "--processes", "2", "--threads", "2",
        env=bouncer_env(pgbouncer, PGQUEUE_PREPARED_STATEMENTS="1"),
    )  # fmt: skip
    try:
        wait_until(lambda: statuses() == Counter({"completed": 40}), timeout=120)
        jobs.record.enqueue_many([(str(out), f"more-{i}") for i in range(20)])
        wait_until(lambda: statuses() == Counter({"completed": 60}), timeout=120)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert "prepared statements off" in log.lower(), log
    assert recorded(out) == Counter(
        [f"job-{i}" for i in range(40)] + [f"more-{i}" for i in range(20)]
    )
