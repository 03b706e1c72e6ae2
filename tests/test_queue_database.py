"""A dedicated queue database, end to end: ``PGQUEUE_DATABASE = "queue"`` with
``django_pgqueue.routers.QueueRouter``, while the project's own rows (users, the admin's log)
stay in "default" (docs/settings.md#a-dedicated-queue-database).

"queue" is a second test database on the same server (tests/settings.py): pytest-django makes
and migrates it only when a test of this module runs. Every other test keeps the queue in
"default"; here a fixture routes it to "queue", and the worker subprocess runs with
``tests.queue_database_settings``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.db import connections, transaction
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.models import Job, Queue, Schedule, Worker
from django_pgqueue.states import JobStatus
from tests.test_metrics_view import samples
from tests.test_storage_integrity import check_output, without_triggers
from tests.testapp import jobs
from tests.utils import start_worker, stop, wait_until, worker_env

ROUTER = "django_pgqueue.routers.QueueRouter"
BOTH = ["default", "queue"]

pytestmark = pytest.mark.django_db(databases=BOTH)


@pytest.fixture(autouse=True)
def queue_database(settings):
    """The queue in "queue", routed there, for this test only."""
    settings.PGQUEUE_DATABASE = "queue"
    settings.DATABASE_ROUTERS = [ROUTER]


def in_default() -> int:
    """Jobs in the default database: none, whatever a test does."""
    return Job.objects.using("default").count()


# ----- enqueue ------------------------------------------------------------------------------


def test_enqueue_in_a_default_transaction_lands_in_the_queue_database():
    with transaction.atomic(using="default"):
        job = jobs.add.enqueue(1, 2)
    assert job._state.db == "queue"
    assert list(Job.objects.using("queue").values_list("pk", flat=True)) == [job.pk]
    assert Job.objects.get(pk=job.pk).name == "tests.testapp.jobs.add"  # the manager: "queue"
    assert in_default() == 0


def test_enqueue_is_not_atomic_with_the_default_database():
    """What a separate database changes: the default transaction rolls back, the job stays."""
    with contextlib.suppress(RuntimeError), transaction.atomic(using="default"):
        job = jobs.add.enqueue(1, 2)
        raise RuntimeError("the business rows roll back")
    assert Job.objects.filter(pk=job.pk).exists()


def test_enqueue_on_commit_waits_for_the_default_databases_commit(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks(using="default", execute=True) as callbacks:
        with transaction.atomic(using="default"):
            jobs.add.enqueue_on_commit(1, 2)
            assert not Job.objects.exists(), "nothing before the commit"
        with contextlib.suppress(RuntimeError), transaction.atomic(using="default"):
            jobs.add.enqueue_on_commit(3, 4)
            raise RuntimeError("rolled back: never enqueued")
    assert len(callbacks) == 1
    assert list(Job.objects.values_list("args", flat=True)) == [[1, 2]]
    assert in_default() == 0


def test_django_tasks_backend_enqueues_and_reads_results_there():
    pytest.importorskip("django.tasks")  # Django 6.0+
    from django_pgqueue.tasks import PgQueueTask
    from tests.taskapp.config import TASKS

    with override_settings(TASKS=TASKS):
        module = importlib.import_module("tests.taskapp.tasks")
        if not isinstance(module.add, PgQueueTask):
            module = importlib.reload(module)  # its tasks made with our backend
        result = module.add.enqueue(2, b=3)
        assert Job.objects.using("queue").filter(pk=int(result.id)).exists()
        assert module.add.get_result(result.id).status == "READY"
    assert in_default() == 0


# ----- the admin, the metrics view, the commands ------------------------------------------------


def test_admin_lists_and_cancels_the_queue_databases_jobs(admin_client):
    pending = jobs.add.enqueue(1, 2)
    changelist = reverse("admin:django_pgqueue_job_changelist")
    response = admin_client.get(changelist)
    assert response.status_code == 200
    assert f"/{pending.pk}/change/" in response.content.decode()
    assert admin_client.get(reverse("admin:django_pgqueue_job_dashboard")).status_code == 200
    detail = admin_client.get(reverse("admin:django_pgqueue_job_change", args=[pending.pk]))
    assert "tests.testapp.jobs.add" in detail.content.decode()

    data = {"action": "cancel_jobs", "_selected_action": [pending.pk], "index": 0}
    assert admin_client.post(changelist, data, follow=True).status_code == 200
    pending.refresh_from_db()
    assert pending.status == JobStatus.CANCELLED
    # The admin's log is the project's: in "default", with the users.
    assert LogEntry.objects.using("default").filter(object_id=str(pending.pk)).exists()


def test_admin_adds_and_deletes_a_schedule_in_the_queue_database(admin_client):
    add = reverse("admin:django_pgqueue_schedule_add")
    response = admin_client.post(
        add,
        {
            "name": "nightly",
            "job": "tests.testapp.jobs.noop",
            "cron": "0 3 * * *",
            "timezone": "UTC",
            "args": "[]",
            "kwargs": "{}",
            "enabled": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    schedule = Schedule.objects.using("queue").get(name="nightly")
    assert not Schedule.objects.using("default").exists()

    delete = reverse("admin:django_pgqueue_schedule_delete", args=[schedule.pk])
    assert admin_client.get(delete).status_code == 200
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not Schedule.objects.exists()


def test_metrics_view_counts_the_queue_databases_jobs(admin_client):
    jobs.add.enqueue(1, 2)
    jobs.add.enqueue(3, 4)
    response = admin_client.get("/pgqueue/metrics")
    assert response.status_code == 200
    found = samples(response.content.decode())
    assert found[("pgqueue_queue_jobs", (("queue", "default"), ("status", "runnable")))] == 2


def test_pgqueue_status_queue_and_prune_commands_use_the_queue_database():
    jobs.add.enqueue(1, 2)
    out = StringIO()
    call_command("pgqueue_status", "--json", stdout=out)
    queues = {q["queue"]: q for q in json.loads(out.getvalue())["queues"]}
    assert queues["default"]["runnable"] == 1

    call_command("pgqueue_queue", "pause", "emails", stdout=StringIO())
    assert Queue.objects.using("queue").get(name="emails").paused
    assert not Queue.objects.using("default").exists()

    done = jobs.add.enqueue(5, 6)
    Job.objects.filter(pk=done.pk).update(
        status=JobStatus.COMPLETED, finished_at=timezone.now() - timedelta(days=30)
    )
    assert Job.objects.prune() >= 1
    assert not Job.objects.filter(pk=done.pk).exists()


def test_storage_check_and_repair_look_in_the_queue_database():
    stranded = without_triggers(jobs.noop.enqueue, using="queue")
    text = check_output("queue")
    assert "django_pgqueue.E101" in text and f"#{stranded.pk}" in text
    assert "django_pgqueue.E101" not in check_output("default")  # the queue is not there

    call_command("pgqueue_repair", stdout=StringIO())
    assert "django_pgqueue.E101" not in check_output("queue")


def test_without_the_router_the_check_says_so(settings):
    settings.DATABASE_ROUTERS = []
    assert "django_pgqueue.E005" in check_output("default")


def test_the_models_managers_go_to_the_queue_database_without_a_router(settings):
    """``Job.objects``, ``Schedule.objects``... follow PGQUEUE_DATABASE by themselves: the
    router is for what Django does on its own (the admin's saves, migrate)."""
    settings.DATABASE_ROUTERS = []
    job = jobs.add.enqueue(1, 2)
    assert Job.objects.get(pk=job.pk).pk == job.pk
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.COMPLETED, finished_at=timezone.now() - timedelta(days=30)
    )
    assert Job.objects.prune() == 1
    Schedule.objects.create(name="s", job="tests.testapp.jobs.noop", every=60)
    assert Schedule.objects.using("queue").filter(name="s").exists()
    assert not Schedule.objects.using("default").exists()
    assert in_default() == 0


def test_the_router_keeps_the_queues_tables_in_the_queue_database():
    from django.db import router

    assert router.db_for_read(Job) == router.db_for_write(Schedule) == "queue"
    assert router.db_for_write(LogEntry) == "default"
    assert router.allow_migrate("queue", "django_pgqueue")
    assert not router.allow_migrate("default", "django_pgqueue")
    assert router.allow_migrate("default", "auth")


# ----- a worker ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_a_worker_runs_jobs_and_fires_schedules_from_the_queue_database(tmp_path: Path):
    out = tmp_path / "out"
    for value in ("a", "b", "c"):
        jobs.record.enqueue(str(out), value)
    Schedule.objects.create(
        name="every minute",
        job="tests.testapp.jobs.record",
        every=60,
        args=[str(out), "tick"],
        next_run_at=timezone.now() - timedelta(seconds=1),
    )
    env = worker_env(
        DJANGO_SETTINGS_MODULE="tests.queue_database_settings",
        PGQUEUE_QUEUE_DATABASE_NAME=connections["queue"].settings_dict["NAME"],
        PGQUEUE_POLL_INTERVAL="0.2",
    )
    worker = start_worker("--worker-id", "qdb-worker", env=env)
    try:
        wait_until(lambda: Job.objects.completed().count() == 4, timeout=30)
    finally:
        log = stop(worker)
    assert sorted(line.split()[0] for line in out.read_text().splitlines()) == [
        "a",
        "b",
        "c",
        "tick",
    ], log
    assert Worker.objects.filter(worker_id="qdb-worker").exists()
    assert in_default() == 0
    assert not Worker.objects.using("default").exists()
    assert operations.violations(operations.DjangoDatabase("queue")) == []
