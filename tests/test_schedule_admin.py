"""The Schedule admin through Django's test client: list, add (validated like an enqueue),
edit with a preview, "edited: differs from code" and reset, run now, bulk enable/disable,
read-only without the change permission, and the job list's schedule filter."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_pgqueue.models import Job, Schedule
from django_pgqueue.schedules.declaration import Declaration
from django_pgqueue.schedules.sync import sync

pytestmark = pytest.mark.django_db

LIST = reverse("admin:django_pgqueue_schedule_changelist")
ADD = reverse("admin:django_pgqueue_schedule_add")
JOBS = reverse("admin:django_pgqueue_job_changelist")
RECORD = "tests.testapp.jobs.record"
NOOP = "tests.testapp.jobs.noop"


def change_url(schedule: Schedule) -> str:
    return reverse("admin:django_pgqueue_schedule_change", args=[schedule.pk])


def operate_url(schedule: Schedule, operation: str) -> str:
    return reverse("admin:django_pgqueue_schedule_operate", args=[schedule.pk, operation])


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    return client


@pytest.fixture
def viewer_client(django_user_model):
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_schedule", "view_job"]))
    client = Client()
    client.force_login(user)
    return client


def form_data(**changes) -> dict:
    data = {
        "name": "hourly report",
        "job": RECORD,
        "cron": "0 * * * *",
        "every": "",
        "timezone": "Europe/Paris",
        "args": '["/dev/null", "report"]',
        "kwargs": "{}",
        "queue": "",
        "priority": "",
        "enabled": "on",
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_the_list_shows_timing_next_and_last_run_source_and_broken(admin_client):
    Schedule.objects.create(name="nightly", job=NOOP, cron="0 3 * * *", timezone="Europe/Paris")
    Schedule.objects.create(name="orphan", job=NOOP, every=60)
    Schedule.objects.filter(name="orphan").update(job="tests.testapp.jobs.removed")
    sync(declarations=[Declaration(job=RECORD, every=30.0, args=["/dev/null", "x"])])
    page = admin_client.get(LIST).content.decode()
    assert "At 03:00" in page and "(Europe/Paris)" in page
    assert "Every 30 seconds" in page
    assert "CET" in page or "CEST" in page  # next runs shown in the schedule's zone
    assert "is not registered" in page  # the orphan is broken, said so
    assert ">admin<" in page and ">code<" in page
    assert f"{JOBS}?schedule=nightly" in page


def test_a_schedule_made_in_the_admin_for_a_registered_job(admin_client):
    response = admin_client.post(ADD, form_data())
    assert response.status_code == 302, response.content.decode()[:3000]
    schedule = Schedule.objects.get(name="hourly report")
    assert (schedule.source, schedule.job, schedule.args) == (
        "admin",
        RECORD,
        ["/dev/null", "report"],
    )
    assert schedule.queue is None and schedule.next_run_at > timezone.now()
    assert schedule.next_run_at.minute == 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"args": '["only one"]'}, "missing a required argument"),
        ({"args": '[{"a": "\\u0000"}, "x"]'}, "NUL"),
        ({"kwargs": '{"nope": 1}'}, "unexpected keyword argument"),
        ({"cron": "0 25 * * *"}, "invalid"),
        ({"cron": "", "every": "0.5"}, "at least 1 second"),
        ({"cron": "0 3 * * *", "every": "60"}, "not both"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"job": "not.a.job"}, "Select a valid choice"),
        ({"priority": "500"}, "less than or equal to 100"),
    ],
)
def test_the_add_form_refuses_what_an_enqueue_would(admin_client, changes, message):
    response = admin_client.post(ADD, form_data(**changes))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Schedule.objects.exists()


def test_the_edit_page_previews_the_next_five_runs(admin_client):
    schedule = Schedule.objects.create(
        name="n", job=NOOP, cron="30 2 * * *", timezone="Europe/Paris"
    )
    page = admin_client.get(change_url(schedule)).content.decode()
    assert "next 5 runs" in page.lower()
    preview = re.search(r"<ul class='pgqueue-preview'>(.*?)</ul>", page, re.S).group(1)
    runs = re.findall(r"<li>(.*?)</li>", preview)
    assert len(runs) == 5 and all(" 02:30:00 CE" in r or " 03:00:00 CE" in r for r in runs), runs
    assert "Only the latest missed run is enqueued" in page


def test_an_edited_code_schedule_says_so_and_resets_to_code(admin_client):
    sync(declarations=[Declaration(job=RECORD, every=30.0, args=["/dev/null", "x"])])
    schedule = Schedule.objects.get()
    response = admin_client.post(
        change_url(schedule),
        form_data(
            name=None,
            job=None,
            cron="",
            every="120",
            timezone=schedule.timezone,
            args='["/dev/null", "x"]',
        ),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    schedule.refresh_from_db()
    assert schedule.every == 120.0 and schedule.edited
    page = admin_client.get(change_url(schedule)).content.decode()
    assert "edited: differs from code in every" in page
    assert "Reset to code" in page
    # A later sync keeps the edit.
    sync(declarations=[Declaration(job=RECORD, every=30.0, args=["/dev/null", "x"])])
    schedule.refresh_from_db()
    assert schedule.every == 120.0
    admin_client.post(operate_url(schedule, "reset-to-code"))
    schedule.refresh_from_db()
    assert (schedule.every, schedule.edited) == (30.0, False)
    assert "Reset to code" not in admin_client.get(change_url(schedule)).content.decode()


def test_run_now_enqueues_one_run_without_moving_the_schedule(admin_client):
    schedule = Schedule.objects.create(name="n", job=RECORD, args=["/dev/null", "x"], every=3600)
    next_run = schedule.next_run_at
    response = admin_client.post(operate_url(schedule, "run-now"), follow=True)
    job = Job.objects.get()
    assert (job.schedule, job.name, job.args) == ("n", RECORD, ["/dev/null", "x"])
    assert f"enqueued job #{job.pk}" in response.content.decode()
    schedule.refresh_from_db()
    assert schedule.next_run_at == next_run and schedule.last_run_at is None
    # The bulk action does the same.
    admin_client.post(LIST, {"action": "run_schedules_now", "_selected_action": [schedule.pk]})
    assert Job.objects.filter(schedule="n").count() == 2


def test_bulk_disable_and_enable(admin_client):
    a = Schedule.objects.create(name="a", job=NOOP, every=60)
    b = Schedule.objects.create(name="b", job=NOOP, every=60)
    admin_client.post(LIST, {"action": "disable_schedules", "_selected_action": [a.pk, b.pk]})
    assert not Schedule.objects.filter(enabled=True).exists()
    assert not Schedule.objects.exclude(next_run_at=None).exists()
    assert "- (disabled)" in admin_client.get(LIST).content.decode()
    admin_client.post(LIST, {"action": "enable_schedules", "_selected_action": [a.pk]})
    a.refresh_from_db()
    assert a.enabled and a.next_run_at > timezone.now()


def test_the_enabled_toggle_in_the_list(admin_client):
    a = Schedule.objects.create(name="a", job=NOOP, every=60)
    response = admin_client.post(
        LIST,
        {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-0-id": str(a.pk),
            "_save": "Save",
        },
    )
    assert response.status_code == 302
    a.refresh_from_db()
    assert (a.enabled, a.next_run_at) == (False, None)


def test_without_change_permission_it_is_read_only(viewer_client):
    schedule = Schedule.objects.create(name="n", job=NOOP, every=60)
    page = viewer_client.get(change_url(schedule)).content.decode()
    assert "Run now" not in page and 'name="every"' not in page
    listing = viewer_client.get(LIST).content.decode()
    assert "run_schedules_now" not in listing and 'name="form-0-enabled"' not in listing
    assert viewer_client.post(operate_url(schedule, "run-now")).status_code == 403
    assert (
        viewer_client.post(
            change_url(schedule), form_data(name="n", every="5", cron="")
        ).status_code
        == 403
    )
    viewer_client.post(LIST, {"action": "disable_schedules", "_selected_action": [schedule.pk]})
    assert not Job.objects.exists() and Schedule.objects.get().enabled


def test_the_job_list_filters_by_schedule(admin_client):
    schedule = Schedule.objects.create(name="n", job=NOOP, every=60)
    mine = schedule.run_now()
    other = Job.objects.create(name=NOOP)
    page = admin_client.get(JOBS, {"schedule": "n"}).content.decode()
    assert "?schedule=n" in admin_client.get(JOBS).content.decode()  # offered as a filter
    assert reverse("admin:django_pgqueue_job_change", args=[mine.pk]) in page
    assert reverse("admin:django_pgqueue_job_change", args=[other.pk]) not in page
    detail = admin_client.get(
        reverse("admin:django_pgqueue_job_change", args=[mine.pk])
    ).content.decode()
    assert "Schedule" in detail and ">n<" in detail


def list_form(*rows: tuple[Schedule, bool]) -> dict:
    """The Schedules list's POST: each row's enabled checkbox, ticked or not."""
    data = {
        "form-TOTAL_FORMS": str(len(rows)),
        "form-INITIAL_FORMS": str(len(rows)),
        "_save": "Save",
    }
    for i, (schedule, enabled) in enumerate(rows):
        data[f"form-{i}-id"] = str(schedule.pk)
        if enabled:
            data[f"form-{i}-enabled"] = "on"
    return data


def broken_schedule(name: str = "orphan") -> Schedule:
    """A schedule whose job is no longer registered (the code that declared it is gone)."""
    schedule = Schedule.objects.create(name=name, job=NOOP, every=60)
    Schedule.objects.filter(pk=schedule.pk).update(job="tests.testapp.jobs.removed")
    return Schedule.objects.get(pk=schedule.pk)


def test_a_broken_schedule_can_be_disabled_from_the_list(admin_client):
    # Issue 36: ValueError: 'ScheduleForm' has no field named 'job' (a 500).
    healthy, orphan = Schedule.objects.create(name="a", job=NOOP, every=60), broken_schedule()
    response = admin_client.post(LIST, list_form((healthy, True), (orphan, False)))
    assert response.status_code == 302
    orphan.refresh_from_db()
    assert (orphan.enabled, orphan.next_run_at) == (False, None)


def test_a_broken_schedule_on_the_page_does_not_stop_saving_another(admin_client):
    healthy, orphan = Schedule.objects.create(name="a", job=NOOP, every=60), broken_schedule()
    response = admin_client.post(LIST, list_form((healthy, False), (orphan, True)))
    assert response.status_code == 302
    healthy.refresh_from_db()
    orphan.refresh_from_db()
    assert (healthy.enabled, orphan.enabled) == (False, True)


def test_a_broken_schedule_is_not_enabled_from_the_list(admin_client):
    orphan = broken_schedule()
    Schedule.objects.filter(pk=orphan.pk).update(enabled=False, next_run_at=None)
    response = admin_client.post(LIST, list_form((orphan, True)))
    assert response.status_code == 200
    assert "in this code). Fix it on its page first." in response.content.decode()
    orphan.refresh_from_db()
    assert not orphan.enabled


@pytest.mark.parametrize(
    "changes",
    [
        {"args": '["\\ud800", "x"]'},
        {"args": '["/dev/null", "\\udfff"]'},
        {"kwargs": '{"\\ud800": 1}'},
    ],
)
def test_a_lone_surrogate_in_the_arguments_is_a_form_error(admin_client, changes):
    # Issue 36: UnicodeEncodeError while rendering the form's error (a 500).
    response = admin_client.post(ADD, form_data(**changes))
    assert response.status_code == 200
    assert "lone surrogate" in response.content.decode()
    assert not Schedule.objects.exists()
    schedule = Schedule.objects.create(name="a", job=RECORD, every=60, args=["/dev/null", "x"])
    response = admin_client.post(change_url(schedule), form_data(name="a", **changes))
    assert response.status_code == 200
    assert "lone surrogate" in response.content.decode()
    schedule.refresh_from_db()
    assert schedule.args == ["/dev/null", "x"]
