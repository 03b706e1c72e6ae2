"""django.tasks on our workers: Django's documented behaviours against PgQueueBackend, with
real PostgreSQL and real ``run_jobs`` subprocesses (settings ``tests.taskapp.settings``, whose
workers learn the tasks only through autodiscovery)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType

import django
import pytest

from tests.utils import ROOT, run_worker, worker_env

if django.VERSION < (6, 0):
    pytest.skip(
        f"django.tasks needs Django 6.0+ (this is {django.get_version()})",
        allow_module_level=True,
    )

from asgiref.sync import async_to_sync
from django.db import transaction
from django.tasks import (
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
)
from django.tasks.exceptions import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.tasks.signals import task_enqueued
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import InvalidJobArguments, UnknownJob, registry
from django_pgqueue.models import Job
from django_pgqueue.tasks import PgQueueBackend, PgQueueTask
from django_pgqueue.tasks import task as pgqueue_task
from tests.taskapp.config import TASKS
from tests.testapp import jobs

WORKER_ID = "tasks-worker"


@pytest.fixture(scope="module", autouse=True)
def t() -> ModuleType:
    """``tests.taskapp.tasks``, imported while TASKS uses our backend (as in a project)."""
    with override_settings(TASKS=TASKS):
        module = importlib.import_module("tests.taskapp.tasks")
        if not isinstance(module.add, PgQueueTask):
            module = importlib.reload(module)
        yield module


def work(*args: str, signal_log: Path | None = None, **env: str) -> str:
    """Run a burst worker with the task settings; returns its stderr (logs)."""
    extra = {"DJANGO_SETTINGS_MODULE": "tests.taskapp.settings", **env}
    if signal_log is not None:
        extra["PGQUEUE_TEST_SIGNAL_LOG"] = str(signal_log)
    result = run_worker("--worker-id", WORKER_ID, *args, env=worker_env(**extra))
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stderr


def signals_in(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ----- the backend and its tasks ------------------------------------------------------------------


def test_backend_features_and_task_class(t):
    backend = task_backends["default"]
    assert isinstance(backend, PgQueueBackend)
    assert backend.supports_defer
    assert backend.supports_priority
    assert backend.supports_get_result
    assert backend.supports_async_task
    assert type(t.add) is PgQueueTask
    assert t.always_fails.max_attempts == 3
    assert t.fails_slow_retry.backoff_base == 3600
    # Each task is in the job registry under its module path: the only names workers run.
    assert registry.get("tests.taskapp.tasks.add").func is t.add.func


def test_invalid_task_options_are_refused_at_definition(t):
    with pytest.raises(InvalidTask, match="max_attempts must be between 1 and 1,000,000, got 0"):
        pgqueue_task(max_attempts=0)(module_level_function)
    with pytest.raises(InvalidTask, match="backoff_base must be at least 0 and at most 100 years"):
        pgqueue_task(backoff_base=-1)(module_level_function)
    with pytest.raises(InvalidTask, match="max_attempts must be between 1 and 1,000,000, got 0"):
        t.add.using(max_attempts=0)
    with pytest.raises(InvalidTask, match="timeout must be more than 0"):
        pgqueue_task(timeout=0)(module_level_function)
    with pytest.raises(InvalidTask, match="priority must be a whole number"):
        t.add.using(priority=101)
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        t.add.using(run_after=datetime(2030, 1, 1))


def module_level_function() -> None:
    return None


@pytest.mark.skipif(django.VERSION < (6, 1), reason="Django 6.1 forwards @task options")
@pytest.mark.django_db
def test_django_task_decorator_passes_retry_options_to_our_task_class(t):
    defined = task(max_attempts=4, backoff_base=1.5, backoff_max=60)(module_level_function)
    assert type(defined) is PgQueueTask
    assert (defined.max_attempts, defined.backoff_base, defined.backoff_max) == (4, 1.5, 60)
    assert Job.objects.get(pk=int(defined.enqueue().id)).max_attempts == 4


@pytest.mark.django_db
def test_our_task_decorator_takes_retry_options_and_tolerates_other_backends(t):
    defined = pgqueue_task(max_attempts=4, backoff_max=60, priority=5)(module_level_function)
    assert type(defined) is PgQueueTask
    assert (defined.max_attempts, defined.backoff_max, defined.priority) == (4, 60, 5)
    assert Job.objects.get(pk=int(defined.enqueue().id)).max_attempts == 4
    assert type(pgqueue_task(module_level_function)) is PgQueueTask
    # Under another backend (ImmediateBackend in a project's tests), options are dropped.
    inline = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    with override_settings(TASKS=inline):
        immediate = pgqueue_task(max_attempts=4)(module_level_function)
        assert type(immediate).__name__ == "Task"
        assert immediate.enqueue().status == TaskResultStatus.SUCCESSFUL


@pytest.mark.django_db
def test_tasks_of_other_backends_are_refused(t):
    immediate = "django.tasks.backends.immediate.ImmediateBackend"
    with override_settings(TASKS={**TASKS, "inline": {"BACKEND": immediate}}):
        other = task(backend="inline")(module_level_function)
        with pytest.raises(InvalidTask, match="was not created by a PgQueueBackend"):
            other.using(backend="default").enqueue()
    assert not Job.objects.exists()


# ----- enqueue -> SUCCESSFUL ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueued_task_runs_on_the_worker_and_succeeds(t):
    result = t.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    assert result.backend == "default"
    assert (result.args, result.kwargs) == ([2], {"b": 3})
    assert result.enqueued_at is not None
    assert (result.started_at, result.finished_at, result.worker_ids, result.errors) == (
        None,
        None,
        [],
        [],
    )
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    row = Job.objects.get(pk=int(result.id))
    assert (row.name, row.queue, row.priority, row.status) == (
        "tests.taskapp.tasks.add",
        "default",
        0,
        "pending",
    )

    work()

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.worker_ids == [WORKER_ID]
    assert result.attempts == 1
    assert result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    fetched = t.add.get_result(result.id)
    assert fetched.return_value == 5
    assert fetched.task.func is t.add.func
    assert Job.objects.get(pk=int(result.id)).result == 5


@pytest.mark.django_db(transaction=True)
def test_return_values_are_normalized_like_django_and_non_json_fails(t):
    pair = t.pair.enqueue("a", (1, 2))  # a tuple argument becomes a list, as in Django
    assert pair.args == ["a", [1, 2]]
    bad = t.returns_set.enqueue()

    work()

    assert t.pair.get_result(pair.id).return_value == ["a", [1, 2]]
    failed = t.returns_set.get_result(bad.id)
    assert failed.status == TaskResultStatus.FAILED
    [error] = failed.errors
    assert error.exception_class is TypeError
    assert "cannot be stored as its JSON return value" in error.traceback


@pytest.mark.django_db(transaction=True)
def test_async_task_enqueued_from_async_code_runs_on_the_worker(t):
    result = async_to_sync(t.async_add.aenqueue)(20, 22)
    assert result.status == TaskResultStatus.READY

    work()

    fetched = async_to_sync(t.async_add.aget_result)(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 42
    async_to_sync(result.arefresh)()
    assert result.return_value == 42


@pytest.mark.django_db(transaction=True)
def test_an_async_task_runs_natively_on_the_workers_event_loop(t):
    from django_pgqueue.models import Job

    result = t.async_where.enqueue()
    assert Job.objects.get(pk=int(result.id)).is_async
    work()
    assert t.async_where.get_result(result.id).return_value == "pgqueue-asyncio"


# ----- failures, retries, context ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_failing_task_is_retried_then_failed_with_one_error_per_attempt(t):
    result = t.always_fails.enqueue("kaboom")
    assert Job.objects.get(pk=int(result.id)).max_attempts == 3  # @task(max_attempts=3)

    work()

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3
    assert result.worker_ids == [WORKER_ID] * 3
    assert len(result.errors) == 3
    for error in result.errors:
        assert error.exception_class_path == "builtins.ValueError"
        assert error.exception_class is ValueError
        assert "ValueError: kaboom" in error.traceback
    assert result.finished_at is not None
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert Job.objects.get(pk=int(result.id)).status == "dead"


@pytest.mark.django_db(transaction=True)
def test_context_attempt_starts_at_one_and_counts_retries(t, tmp_path):
    log = tmp_path / "attempts"
    result = t.flaky.enqueue(str(log), succeed_on=3)
    assert result.kwargs == {"succeed_on": 3}  # the context is not an argument

    work()

    assert log.read_text().split() == ["1", "2", "3"]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3
    assert result.attempts == 3
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"] * 2


@pytest.mark.django_db(transaction=True)
def test_max_attempts_and_backoff_options_reach_the_job_and_the_worker(t):
    assert Job.objects.get(pk=int(t.add.enqueue(1, 1).id)).max_attempts == 5  # the setting
    assert Job.objects.get(pk=int(t.add.using(max_attempts=2).enqueue(1, 1).id)).max_attempts == 2
    slow = t.fails_slow_retry.enqueue()  # backoff_base=3600: the retry waits an hour
    with override_settings(TASKS={"default": {**TASKS["default"], "OPTIONS": {"max_attempts": 7}}}):
        assert Job.objects.get(pk=int(t.echo.enqueue(1).id)).max_attempts == 7  # OPTIONS
        assert Job.objects.get(pk=int(t.always_fails.enqueue("x").id)).max_attempts == 3
    Job.objects.exclude(pk=int(slow.id)).delete()

    work()

    slow.refresh()
    assert slow.status == TaskResultStatus.READY  # failed once, waiting for its retry
    assert slow.attempts == 1
    assert len(slow.errors) == 1
    row = Job.objects.get(pk=int(slow.id))
    assert row.run_after > timezone.now() + timedelta(minutes=30)


@pytest.mark.django_db(transaction=True)
def test_hung_task_fails_on_its_timeout_and_the_worker_carries_on(t, tmp_path):
    assert registry.get("tests.taskapp.tasks.hangs").spec.timeout == 1.0  # what the worker reads
    out = tmp_path / "out"
    hung = t.hangs.enqueue(30.0)
    after = t.record.enqueue(str(out), "after")

    work("--threads", "1")  # one thread: only its replacement can run the next task

    hung.refresh()
    assert hung.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in hung.errors] == ["django_pgqueue.exceptions.JobTimeout"]
    assert out.read_text() == "after\n"
    assert t.record.get_result(after.id).status == TaskResultStatus.SUCCESSFUL


def test_timeout_falls_back_to_the_backend_options(t):
    config = {"default": {**TASKS["default"], "OPTIONS": {"timeout": timedelta(minutes=2)}}}
    with override_settings(TASKS=config):
        assert registry.get("tests.taskapp.tasks.add").spec.timeout == 120.0
        assert registry.get("tests.taskapp.tasks.hangs").spec.timeout == 1.0
    assert registry.get("tests.taskapp.tasks.add").spec.timeout is None  # PGQUEUE_JOB_TIMEOUT


@pytest.mark.django_db(transaction=True)
def test_failed_task_shows_in_the_admin_and_is_retried_there(t, tmp_path, admin_client):
    needed = tmp_path / "needed"
    result = t.needs_file.enqueue(str(needed))
    work()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is FileNotFoundError

    # One table, one admin: the task is a dead job in the changelist, with its traceback.
    changelist = admin_client.get(
        reverse("admin:django_pgqueue_job_changelist"), {"status": "dead"}
    )
    assert [job.pk for job in changelist.context["cl"].result_list] == [int(result.id)]
    assert "tests.taskapp.tasks.needs_file" in changelist.content.decode()
    detail = admin_client.get(reverse("admin:django_pgqueue_job_change", args=[result.id]))
    assert "FileNotFoundError" in detail.content.decode()

    needed.write_text("here")
    retry = reverse("admin:django_pgqueue_job_operate", args=[result.id, "retry"])
    assert admin_client.post(retry).status_code == 302
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert result.worker_ids == []

    work()

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "here"
    assert result.attempts == 1  # a new run: attempts start again
    assert len(result.errors) == 1  # the earlier failure stays in the history


@pytest.mark.django_db(transaction=True)
def test_worker_runs_only_registered_tasks_never_paths_from_the_table(t):
    """A worker whose settings don't use our backend never imports the task's module: the
    job fails with UnknownJob instead of running a dotted path read from the row."""
    result = t.add.using(max_attempts=1).enqueue(1, 2)
    run = run_worker("--worker-id", WORKER_ID, env=worker_env())  # tests.settings
    assert run.returncode == 0, run.stderr
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is UnknownJob


# ----- ordering, deferral, queues ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_higher_priority_tasks_run_first(t, tmp_path):
    out = tmp_path / "order"
    for value, priority in [("low", -10), ("mid-1", 0), ("high", 50), ("mid-2", 0), ("top", 100)]:
        t.record.using(priority=priority).enqueue(str(out), value)

    work("--threads", "1")

    assert out.read_text().split() == ["top", "high", "mid-1", "mid-2", "low"]


@pytest.mark.django_db(transaction=True)
def test_run_after_is_respected(t, tmp_path):
    out = tmp_path / "ran"
    later = t.record.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(str(out), "dt")
    relative = t.record.using(run_after=timedelta(hours=1)).enqueue(str(out), "td")
    due = t.record.using(run_after=timezone.now() - timedelta(seconds=1)).enqueue(str(out), "due")
    assert Job.objects.get(pk=int(relative.id)).run_after > timezone.now() + timedelta(minutes=50)

    work()

    assert out.read_text().split() == ["due"]
    for result in (later, relative):
        result.refresh()
        assert result.status == TaskResultStatus.READY
        assert result.worker_ids == []
    assert t.record.get_result(due.id).status == TaskResultStatus.SUCCESSFUL

    Job.objects.filter(pk__in=[int(later.id), int(relative.id)]).run_now()
    work()
    assert sorted(out.read_text().split()) == ["dt", "due", "td"]


@pytest.mark.django_db(transaction=True)
def test_queues_setting_is_validated_and_queues_route_to_workers(t, tmp_path):
    with pytest.raises(InvalidTask, match="Queue 'reports' is not valid for backend"):
        t.add.using(queue_name="reports")
    with pytest.raises(InvalidTask, match="Queue 'reports' is not valid for backend"):
        task(queue_name="reports")(module_level_function)

    out = tmp_path / "sent"
    email = t.send_email.enqueue(str(out), "ada@example.com")
    assert Job.objects.get(pk=int(email.id)).queue == "emails"
    work("--queue", "default")
    assert not out.exists()
    work("--queue", "emails")
    assert out.read_text() == "email ada@example.com\n"
    assert t.send_email.get_result(email.id).task.queue_name == "emails"


def test_invalid_backend_configuration_is_refused(t):
    cases = [
        ({"OPTIONS": {"max_attempt": 3}}, r"unknown keys \['max_attempt'\]"),
        ({"OPTIONS": {"max_attempts": 0}}, "max_attempts must be between 1 and 1,000,000, got 0"),
        ({"OPTIONS": {"backoff_max": "soon"}}, "backoff_max must be a number of seconds"),
        ({"OPTIONS": {"timeout": -1}}, "timeout must be more than 0"),
        ({"QUEUES": ["default", ""]}, "queue names must not be empty or blank"),
    ]
    for params, message in cases:
        config = {"broken": {"BACKEND": "django_pgqueue.tasks.PgQueueBackend", **params}}
        with (
            override_settings(TASKS={**TASKS, **config}),
            pytest.raises(InvalidTaskBackend, match=message),
        ):
            task_backends["broken"]


def test_system_check_requires_the_app(t, monkeypatch):
    backend = task_backends["default"]
    assert backend.check() == []
    monkeypatch.setattr("django_pgqueue.tasks.backend.apps.is_installed", lambda name: False)
    [error] = backend.check()
    assert error.id == "django_pgqueue.E010"
    assert "django_pgqueue is not in INSTALLED_APPS" in error.msg


# ----- results ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_get_result_of_unknown_ids_raises_does_not_exist(t):
    for missing in ["999999999", "abc", "", "-1", "1.5", str(2**70)]:
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(missing)
    job_row = jobs.add.enqueue(1, 2)  # an @job, not a task
    with pytest.raises(TaskResultDoesNotExist, match=r"not of a django\.tasks task"):
        default_task_backend.get_result(str(job_row.pk))
    other = t.echo.enqueue("x")
    with pytest.raises(TaskResultMismatch):
        t.add.get_result(other.id)
    assert async_to_sync(default_task_backend.aget_result)(other.id).args == ["x"]


@pytest.mark.django_db
def test_status_mapping_for_running_and_cancelled_jobs(t):
    running = t.add.enqueue(1, 2)
    cancelled = t.add.enqueue(3, 4)
    [claimed] = Job.objects.claim("claimer-1", limit=1)
    assert claimed.pk == int(running.id)
    running.refresh()
    assert running.status == TaskResultStatus.RUNNING
    assert running.worker_ids == ["claimer-1"]
    assert running.started_at is not None
    assert running.last_attempted_at == running.started_at
    assert Job.objects.get(pk=int(cancelled.id)).cancel()
    cancelled.refresh()
    assert cancelled.status == TaskResultStatus.FAILED
    assert cancelled.finished_at is not None
    assert cancelled.worker_ids == []


# ----- arguments and transactions ---------------------------------------------------------------


@pytest.mark.django_db
def test_bad_arguments_fail_at_enqueue_naming_the_argument(t):
    with pytest.raises(InvalidJobArguments, match=r"argument 1 \(b\) of type datetime"):
        t.add.enqueue(1, timezone.now())
    with pytest.raises(InvalidJobArguments, match="keyword argument 'b'"):
        t.add.enqueue(1, b={1: "int key"})
    with pytest.raises(InvalidJobArguments, match="missing a required argument"):
        t.add.enqueue(1)
    with pytest.raises(InvalidJobArguments, match="too many positional arguments"):
        t.flaky.enqueue(object(), "path", 3)  # the context is not passed by callers
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_transaction_rollback_drops_the_task(t, tmp_path):
    out = tmp_path / "ran"
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = t.record.enqueue(str(out), "rolled back")
        assert Job.objects.filter(pk=int(dropped.id)).exists()  # visible to its transaction
        raise RuntimeError("roll back")
    assert not Job.objects.filter(pk=int(dropped.id)).exists()
    with pytest.raises(TaskResultDoesNotExist):
        t.record.get_result(dropped.id)
    with transaction.atomic():
        kept = t.record.enqueue(str(out), "committed")

    work()

    assert out.read_text() == "committed\n"
    assert t.record.get_result(kept.id).status == TaskResultStatus.SUCCESSFUL


# ----- signals ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_signals_are_sent_for_enqueue_start_and_finish(t, tmp_path):
    enqueued = []

    def on_enqueued(sender, task_result, **kwargs):
        enqueued.append((sender, task_result.id, task_result.status))

    task_enqueued.connect(on_enqueued)
    try:
        ok = t.add.enqueue(1, 2)
        bad = t.always_fails.using(max_attempts=2).enqueue("signal test")
    finally:
        task_enqueued.disconnect(on_enqueued)
    assert enqueued == [
        (PgQueueBackend, ok.id, TaskResultStatus.READY),
        (PgQueueBackend, bad.id, TaskResultStatus.READY),
    ]

    log = tmp_path / "signals"
    stderr = work("--threads", "1", signal_log=log)

    def seen(result_id):
        return [
            (s["signal"], s["status"], s["attempts"], s["errors"], s["handling"])
            for s in signals_in(log)
            if s["id"] == result_id
        ]

    assert seen(ok.id) == [
        ("started", "RUNNING", 1, 0, None),
        ("finished", "SUCCESSFUL", 1, 0, None),
    ]
    # Failures: sent from inside the exception handler; READY while a retry is due.
    assert seen(bad.id) == [
        ("started", "RUNNING", 1, 0, None),
        ("finished", "READY", 1, 1, "ValueError: signal test"),
        ("started", "RUNNING", 2, 1, None),
        ("finished", "FAILED", 2, 2, "ValueError: signal test"),
    ]
    # ... so Django's own log receiver reports the exception with its traceback.
    path = "tests.taskapp.tasks.always_fails"
    assert f"Task id={bad.id} path={path} state=FAILED\nTraceback" in stderr
    # ... and only there: one traceback per failed attempt, not Django's and the worker's both.
    assert stderr.count("Traceback (most recent call last)") == 2, stderr
    assert stderr.count("(ValueError, traceback in the django.tasks log)") == 2, stderr
    assert f"Task id={ok.id} path=tests.taskapp.tasks.add state=SUCCESSFUL" in stderr


# ----- Django before 6.0 ------------------------------------------------------------------------


def test_import_without_django_tasks_fails_with_a_clear_message():
    """As on Django 5.2 (no django.tasks): the package works, the backend module says why not."""
    code = (
        # Modules Django 6.0 added, absent on 5.2:
        "import sys; sys.modules['django.tasks'] = sys.modules['django.utils.json'] = None\n"
        "import django; django.VERSION = (5, 2, 0, 'final', 0)\n"
        "django.setup()\n"
        "import django_pgqueue\n"
        "try:\n"
        "    import django_pgqueue.tasks\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc.name, exc)\n"
    )
    env = worker_env(DJANGO_SETTINGS_MODULE="tests.settings")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "ModuleNotFoundError django_pgqueue.tasks django_pgqueue.tasks is a backend for "
        "django.tasks, which needs Django 6.0 or later"
    )
