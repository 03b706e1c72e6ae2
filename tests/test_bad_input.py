"""Bad input at the enqueue and configuration edges: a clear error before anything is written.

The admin's bad inputs are in ``test_bad_input_admin.py``, the commands' in
``test_bad_input_commands.py``.
"""

from __future__ import annotations

import importlib
import math
from datetime import timedelta

import django
import pytest
from django.core.checks import run_checks
from django.db import transaction
from django.test import override_settings

from django_pgqueue import InvalidJobArguments, job
from django_pgqueue.decorators import DroppedPayloadsWarning
from django_pgqueue.models import Job
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


@job(name="tests.bad_input.echo")
def echo(*args: object, **kwargs: object) -> None:
    return None


UNSTORABLE = [
    pytest.param(("a\x00b",), {}, r"argument 0 holds a NUL character", id="nul-in-arg"),
    pytest.param((), {"x": "a\x00b"}, r"keyword argument 'x' holds a NUL", id="nul-in-kwarg"),
    pytest.param(([{"k": "\x00"}],), {}, r"argument 0 holds a NUL", id="nul-deep-in-arg"),
    pytest.param(({"a\x00": 1},), {}, r"argument 0 holds a NUL", id="nul-in-dict-key"),
    pytest.param((), {"a\x00b": 1}, r"keyword argument name 'a\\x00b' holds a NUL", id="nul-kw"),
    pytest.param(("\ud800",), {}, r"argument 0 holds a lone surrogate", id="lone-surrogate"),
    pytest.param((float("nan"),), {}, r"argument 0 of type float", id="nan"),
]


@pytest.mark.parametrize(("args", "kwargs", "message"), UNSTORABLE)
def test_unstorable_arguments_are_refused_before_any_sql(args, kwargs, message):
    with transaction.atomic():
        with pytest.raises(InvalidJobArguments, match=message):
            echo.enqueue(*args, **kwargs)
        # The caller's transaction is still usable: nothing reached PostgreSQL.
        assert Job.objects.count() == 0
        jobs.add.enqueue(1, 2)
    assert Job.objects.count() == 1


@pytest.fixture
def echo_task():
    """``tests.taskapp.tasks.echo``, a django.tasks task on our backend (Django 6.0+)."""
    if django.VERSION < (6, 0):
        pytest.skip(f"django.tasks needs Django 6.0+ (this is {django.get_version()})")
    from django_pgqueue.tasks import PgQueueTask
    from tests.taskapp.config import TASKS

    with override_settings(TASKS=TASKS):
        module = importlib.import_module("tests.taskapp.tasks")
        if not isinstance(module.echo, PgQueueTask):
            module = importlib.reload(module)
        yield module.echo


TASK_UNSTORABLE = [
    pytest.param(("a\x00b",), {}, r"argument 0 \(value\) holds a NUL", id="nul-in-arg"),
    pytest.param(([{"k": "\x00"}],), {}, r"argument 0 \(value\) holds a NUL", id="nul-deep"),
    pytest.param(({"a\x00": 1},), {}, r"argument 0 \(value\) holds a NUL", id="nul-in-key"),
    pytest.param((), {"value": "a\x00"}, r"keyword argument 'value' holds a NUL", id="nul-kw"),
    pytest.param(("\ud800",), {}, r"argument 0 \(value\) holds a lone surrogate", id="surrogate"),
    pytest.param((float("nan"),), {}, r"argument 0 \(value\) of type float", id="nan"),
]


@pytest.mark.parametrize(("args", "kwargs", "message"), TASK_UNSTORABLE)
def test_the_tasks_backend_refuses_unstorable_arguments_before_any_sql(
    echo_task, args, kwargs, message
):
    with transaction.atomic():
        with pytest.raises(InvalidJobArguments, match=message):
            echo_task.enqueue(*args, **kwargs)
        assert Job.objects.count() == 0
        echo_task.enqueue("fine")  # the caller's transaction is still usable
    assert Job.objects.get().args == ["fine"]


@pytest.mark.parametrize(("args", "kwargs", "message"), UNSTORABLE)
def test_unstorable_arguments_are_refused_at_enqueue_on_commit(args, kwargs, message):
    with transaction.atomic(), pytest.raises(InvalidJobArguments, match=message):
        echo.enqueue_on_commit(*args, **kwargs)
    assert Job.objects.count() == 0


def test_an_emoji_or_an_escaped_backslash_u_is_fine():
    stored = echo.enqueue("😀", "\\u0000 is six characters", {"\\ud800": "x"})
    assert Job.objects.get(pk=stored.pk).args == [
        "😀",
        "\\u0000 is six characters",
        {"\\ud800": "x"},
    ]


def test_enqueue_many_is_all_or_nothing():
    calls: list[tuple[object, ...]] = [(i, i) for i in range(6000)]
    calls[5500] = ("a\x00b", 1)
    with pytest.raises(InvalidJobArguments, match="Item 5500 of enqueue_many"):
        jobs.add.enqueue_many(calls)
    assert Job.objects.count() == 0


def test_enqueue_many_writes_every_batch_in_one_transaction(other_connection):
    ids = jobs.add.enqueue_many([(i, i) for i in range(12_000)])  # three COPY batches
    assert len(ids) == len(set(ids)) == 12_000
    assert Job.objects.count() == 12_000


def test_enqueue_many_with_a_unique_key_warns_about_dropped_arguments():
    handle = jobs.add.using(unique_key="one")
    with pytest.warns(DroppedPayloadsWarning, match="2 of 3 items have arguments that differ"):
        ids = handle.enqueue_many([(1, 1), (1, 2), (3, 3)])
    assert len(set(ids)) == 1
    assert Job.objects.get().args == [1, 1]


def test_enqueue_many_with_a_unique_key_and_equal_arguments_is_quiet(recwarn):
    jobs.add.using(unique_key="same").enqueue_many([{"a": 1, "b": 2}, {"b": 2, "a": 1}])
    assert not [w for w in recwarn if issubclass(w.category, DroppedPayloadsWarning)]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"max_attempts": 2**40}, ValueError, r"max_attempts must be between 1 and 1,000,000"),
        ({"max_attempts": True}, TypeError, r"max_attempts must be an int, not bool"),
        ({"max_attempts": 0}, ValueError, r"max_attempts must be between 1"),
        ({"priority": 2**15}, ValueError, r"priority must be between -100 and 100"),
        ({"priority": 1.5}, TypeError, r"priority must be an int"),
        ({"queue": ""}, ValueError, r"queue must not be empty or blank"),
        ({"queue": "   "}, ValueError, r"queue must not be empty or blank"),
        ({"queue": "q" * 101}, ValueError, r"queue must be at most 100 characters"),
        ({"queue": "a\x00"}, ValueError, r"queue must not hold control characters"),
        ({"unique_key": "k" * 256}, ValueError, r"unique_key must be at most 255"),
        ({"concurrency_key": 5}, TypeError, r"concurrency_key must be a string"),
        ({"run_after": 5}, TypeError, r"run_after must be a datetime or a timedelta"),
        ({"run_after": timedelta(days=365 * 200)}, ValueError, r"run_after must be"),
    ],
)
def test_using_refuses_every_bad_option_with_its_range(options, error, message):
    with pytest.raises(error, match=message):
        jobs.add.using(**options)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"timeout": "10"}, TypeError, r"timeout must be a number of seconds"),
        ({"timeout": -1}, ValueError, r"timeout must be more than 0"),
        ({"timeout": math.inf}, ValueError, r"timeout must be finite"),
        ({"backoff_base": "10"}, TypeError, r"backoff_base must be a number of seconds"),
        ({"backoff_max": math.nan}, ValueError, r"backoff_max must be finite"),
        ({"backoff_base": 1e12}, ValueError, r"backoff_base must be at least 0 and at most 100"),
        ({"max_attempts": True}, TypeError, r"max_attempts must be an int"),
    ],
)
def test_job_refuses_bad_options_at_decoration(options, error, message):
    def f() -> None:
        return None

    with pytest.raises(error, match=message):
        job(name="tests.bad_input.never", **options)(f)


def test_job_accepts_timedeltas_and_keeps_seconds():
    def f() -> None:
        return None

    handle = job(name="tests.bad_input.td", timeout=timedelta(minutes=2), backoff_max=60)(f)
    assert (handle.spec.timeout, handle.spec.backoff_max) == (120.0, 60.0)


def test_every_bad_setting_is_reported_at_once():
    bad = {
        "PGQUEUE_VISIBILITY_TIMEOUT": math.nan,
        "PGQUEUE_RETENTION": 1e300,
        "PGQUEUE_BACKOFF_JITTER": math.nan,
        "PGQUEUE_BACKOFF_BASE": 1e12,
        "PGQUEUE_MAX_ATTEMPTS": 2**40,
        "PGQUEUE_BATCH_SIZE": True,
        "PGQUEUE_DEFAULT_QUEUE": " ",
    }
    with override_settings(**bad):
        messages = run_checks(tags=["django_pgqueue"])
    assert {m.id for m in messages} == {"django_pgqueue.E003"}
    reported = {m.msg.split(" = ")[0] for m in messages}
    assert reported == set(bad)
    nan_message = next(m for m in messages if m.msg.startswith("PGQUEUE_VISIBILITY_TIMEOUT"))
    assert "must be finite" in nan_message.msg
    assert "at most 100 years" in nan_message.hint


def test_big_floats_come_back_as_ints_that_float_gives_back():
    """Documented (docs/jobs.md): jsonb keeps numbers as numeric, so a float from 1e16 up comes
    back as an int of the digits Python wrote, and ``float()`` gives back the float passed."""
    stored = echo.enqueue(1e16, 2.0**60, 0.5, 1e15)
    args = Job.objects.get(pk=stored.pk).args
    assert args == [10**16, 1152921504606847000, 0.5, 1e15]
    assert [type(a) for a in args] == [int, int, float, float]
    assert float(args[0]) == 1e16
    assert float(args[1]) == 2.0**60
