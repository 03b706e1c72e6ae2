"""The job admin through Django's test client: lists, filters, search, detail, actions, permissions.

Every test runs against PostgreSQL. The browser-driven tests are in ``test_admin_browser.py``.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import admin as pgqueue_admin
from django_pgqueue import stats
from django_pgqueue.admin import actions as admin_actions
from django_pgqueue.admin_site import PgQueueAdminConfig, PgQueueAdminSite
from django_pgqueue.models import Job, Queue, Worker

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_pgqueue_job_changelist")
DASHBOARD = reverse("admin:django_pgqueue_job_dashboard")
RETRY_DEAD = reverse("admin:django_pgqueue_job_retry_dead")
ADD = "tests.testapp.jobs.add"
FAILS = "tests.testapp.jobs.always_fails"
WELCOME = "tests.testapp.jobs.send_welcome"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "tests/testapp/jobs.py", line 27, in always_fails\n'
    "    raise RuntimeError(message)\n"
    "RuntimeError: the mail server said no"
)


def make(status: str = "pending", **fields) -> Job:
    """A job in ``status`` with the columns a real one in that state would have."""
    now = timezone.now()
    values: dict = {"name": ADD, "args": [1, 2], "queue": "default", "status": status}
    if status == "running":
        values.update(attempts=1, locked_at=now, locked_by="host:1:w", started_at=now)
    elif status in ("completed", "dead", "cancelled"):
        values.update(attempts=1, started_at=now - timedelta(seconds=2), finished_at=now)
    if status == "dead":
        values.update(
            name=FAILS,
            attempts=3,
            max_attempts=3,
            last_error=TRACEBACK,
            errors=[
                {
                    "attempt": 3,
                    "worker_id": "host:1:w",
                    "exception_class": "builtins.RuntimeError",
                    "traceback": TRACEBACK,
                    "at": now.isoformat(),
                }
            ],
        )
    values.update(fields)
    return Job.objects.create(**values)


def failed(**fields) -> Job:
    """A pending job that failed once and waits for its retry."""
    later = timezone.now() + timedelta(minutes=5)
    return make("pending", name=FAILS, attempts=1, last_error=TRACEBACK, run_after=later, **fields)


def status_of(*jobs: Job) -> list[str]:
    return [Job.objects.get(pk=j.pk).status for j in jobs]


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def listed_ids(response) -> list[int]:
    return [job.pk for job in response.context["cl"].result_list]


def action(client: Client, name: str, jobs, follow: bool = True, **extra):
    data = {"action": name, "_selected_action": [j.pk for j in jobs], "index": 0, **extra}
    return client.post(CHANGELIST, data, follow=follow)


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def admin_client(client, superuser):
    client.force_login(superuser)
    return client


@pytest.fixture
def staff_client(django_user_model):
    """``staff_client("view_job", "change_job")``: a logged-in staff user with those perms only."""

    def make_client(*codenames: str) -> Client:
        user = django_user_model.objects.create_user(
            f"staff-{'-'.join(codenames) or 'none'}", password="pw", is_staff=True
        )
        perms = Permission.objects.filter(
            content_type__app_label="django_pgqueue", codename__in=codenames
        )
        assert perms.count() == len(codenames)
        user.user_permissions.set(perms)
        client = Client()
        client.force_login(user)
        return client

    return make_client


# ----- the list -----------------------------------------------------------------------------


def test_changelist_shows_the_columns_with_a_coloured_status_and_short_error(admin_client):
    dead = make("dead")
    done = make("completed", priority=7)
    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    html = response.content.decode()
    assert listed_ids(response) == [done.pk, dead.pk]
    assert 'class="pgqueue-status pgqueue-status-dead">Dead<' in html
    assert 'class="pgqueue-status pgqueue-status-completed">Completed<' in html
    assert "3/3" in html  # attempts/max
    assert "RuntimeError: the mail server said no" in html  # the last line of the traceback
    assert "Traceback (most recent call last)" not in html  # ... and only that line
    headers = re.findall(r'<th scope="col" class="[^"]*column-(\w+)', html)
    # The last error is under the job's name (tests/test_admin_presentation.py).
    # Run after and priority only where they say something: under the status of a job that
    # runs later, under the queue of a job with a priority (tests/test_admin_layout_browser.py).
    assert headers == [
        "id",
        "name_column",
        "status_column",
        "queue_column",
        "attempts_column",
        "when_column",
    ]
    assert "priority 7" in html
    assert "django_pgqueue/admin.css" in html
    assert "2 jobs" in html


def test_changelist_never_counts_facets_or_the_whole_table(admin_client):
    for _ in range(3):
        make("dead")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(CHANGELIST + "?_facets=1")
    assert response.status_code == 200
    assert response.context["cl"].add_facets is False
    assert "Dead (3)" not in response.content.decode()
    counts = [
        q["sql"] for q in queries if "COUNT(" in q["sql"].upper() and "pgqueue_job" in q["sql"]
    ]
    assert counts == [] or all("LIMIT" in sql for sql in counts)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("dead", ["dead"]),
        ("failed", ["failed"]),
        ("scheduled", ["failed", "scheduled"]),
        ("runnable", ["runnable"]),
        ("pending", ["failed", "scheduled", "runnable"]),
        ("running", ["running"]),
        ("completed", ["completed"]),
        ("cancelled", ["cancelled"]),
    ],
)
def test_status_filter(admin_client, status, expected):
    later = timezone.now() + timedelta(hours=1)
    jobs = {
        "dead": make("dead"),
        "failed": failed(),
        "scheduled": make("pending", run_after=later),
        "runnable": make("pending"),
        "running": make("running"),
        "completed": make("completed"),
        "cancelled": make("cancelled"),
    }
    response = admin_client.get(CHANGELIST, {"status": status})
    assert sorted(listed_ids(response)) == sorted(jobs[k].pk for k in expected)


def test_queue_name_and_date_filters(admin_client):
    email = make("completed", queue="emails", name=WELCOME, args=[42])
    old = make("completed", created_at=timezone.now() - timedelta(days=30))
    assert old.created_at < timezone.now() - timedelta(days=29)
    pending = make("pending")
    response = admin_client.get(CHANGELIST, {"queue": "emails"})
    assert listed_ids(response) == [email.pk]
    assert "?queue=emails" in response.content.decode()  # offered as a choice
    response = admin_client.get(CHANGELIST, {"name": WELCOME})
    assert listed_ids(response) == [email.pk]
    assert ADD in response.content.decode()  # registered names are offered
    week_ago = str(timezone.now() - timedelta(days=7))
    response = admin_client.get(CHANGELIST, {"created_at__gte": week_ago})
    assert sorted(listed_ids(response)) == sorted([email.pk, pending.pk])
    response = admin_client.get(CHANGELIST, {"finished_at__isnull": "True"})
    assert listed_ids(response) == [pending.pk]
    assert old.pk not in listed_ids(admin_client.get(CHANGELIST, {"created_at__gte": week_ago}))


@pytest.mark.parametrize(
    ("term", "key"),
    [
        ("{pk}", "by_id"),
        ("#{pk}", "by_id"),
        ("send_welcome", "welcome"),  # part of a registered name, any case
        ("SEND_WELCOME", "welcome"),
        ("invoice-2024", "keyed"),  # unique_key
        ("tenant-9", "keyed"),  # concurrency_key
        ("mail server said", "dead"),  # error text
        ("4242", "welcome"),  # keyword argument value (number)
        ("alice@example.com", "positional"),  # positional argument value
        ("4242x", "string_arg"),  # a string argument, exactly
        ('"server said"', "dead"),  # a quoted phrase
    ],
)
def test_search(admin_client, term, key):
    jobs = {
        "by_id": make("completed", args=[]),
        "welcome": make(
            "completed", name=WELCOME, queue="emails", args=[], kwargs={"user_id": 4242}
        ),
        "keyed": make("pending", args=[], unique_key="invoice-2024-11", concurrency_key="tenant-9"),
        "dead": make("dead", args=[]),
        "positional": make("completed", args=["alice@example.com", 3]),
        "string_arg": make("completed", args=["4242x"], kwargs={"code": "4242"}),
    }
    make("completed", args=[1, 2])  # never found
    response = admin_client.get(CHANGELIST, {"q": term.format(pk=jobs["by_id"].pk)})
    found = listed_ids(response)
    assert jobs[key].pk in found
    if key != "welcome" or term != "4242":
        assert len(found) == 1, (term, found)


def test_search_terms_must_all_match(admin_client):
    both = make("dead", args=["alice@example.com"])
    make("dead", args=["bob@example.com"])
    response = admin_client.get(CHANGELIST, {"q": "mail alice@example.com"})
    assert listed_ids(response) == [both.pk]


# ----- the detail page ------------------------------------------------------------------


def test_detail_shows_everything_read_only(admin_client):
    now = timezone.now()
    job = make(
        "dead",
        kwargs={"user_id": 42, "tags": ["a", "b"]},
        args=["x"],
        created_at=now - timedelta(seconds=95),
        started_at=now - timedelta(seconds=5),
        finished_at=now - timedelta(seconds=2),
        unique_key="welcome-42",
        locked_by="host:1:w",
    )
    url = reverse("admin:django_pgqueue_job_change", args=[job.pk])
    response = admin_client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<pre class="pgqueue-pre">{\n  &quot;tags&quot;: [\n    &quot;a&quot;,' in html
    assert "&quot;user_id&quot;: 42" in html
    assert "Traceback (most recent call last):" in html  # the full traceback
    assert "raise RuntimeError(message)" in html
    assert "Attempt 3 at" in html and "builtins.RuntimeError" in html  # error history
    assert "1m 30s" in html  # queued for
    assert "3.0s" in html  # ran for
    assert "welcome-42" in html and "host:1:w" in html
    # Read-only: no form field for any column, no save button.
    assert 'name="_save"' not in html
    assert not re.search(
        r'<(input|select|textarea)[^>]+name="(queue|status|locked_at|locked_by|run_after)"', html
    )
    # Retry is offered (change permission, dead job); run now and cancel are not.
    assert "/operate/retry/" in html
    assert "/operate/cancel/" not in html and "/operate/run-now/" not in html


def test_detail_refuses_a_posted_edit_and_the_add_page(admin_client):
    job = make("pending")
    url = reverse("admin:django_pgqueue_job_change", args=[job.pk])
    response = admin_client.post(url, {"queue": "other", "status": "dead", "priority": 5})
    assert response.status_code == 403
    job.refresh_from_db()
    assert (job.queue, job.status) == ("default", "pending")
    assert admin_client.get(reverse("admin:django_pgqueue_job_add")).status_code == 403


def test_detail_buttons_operate_on_one_job(admin_client):
    scheduled = make("pending", run_after=timezone.now() + timedelta(days=1))
    url = reverse("admin:django_pgqueue_job_change", args=[scheduled.pk])
    html = admin_client.get(url).content.decode()
    assert "/operate/run-now/" in html and "/operate/cancel/" in html
    response = admin_client.post(
        reverse("admin:django_pgqueue_job_operate", args=[scheduled.pk, "run-now"]), follow=True
    )
    assert response.redirect_chain[-1][0] == url
    scheduled.refresh_from_db()
    assert scheduled.run_after <= timezone.now()
    assert any("Made 1 job runnable now" in m for m in messages_of(response))
    admin_client.post(reverse("admin:django_pgqueue_job_operate", args=[scheduled.pk, "cancel"]))
    assert status_of(scheduled) == ["cancelled"]
    admin_client.post(reverse("admin:django_pgqueue_job_operate", args=[scheduled.pk, "retry"]))
    assert status_of(scheduled) == ["pending"]


def test_operate_needs_post_and_a_known_operation(admin_client):
    job = make("dead")
    url = reverse("admin:django_pgqueue_job_operate", args=[job.pk, "retry"])
    assert admin_client.get(url).status_code == 405
    bad = reverse("admin:django_pgqueue_job_operate", args=[job.pk, "explode"])
    assert admin_client.post(bad).status_code == 404
    assert status_of(job) == ["dead"]


def test_running_jobs_cannot_be_deleted_from_their_page(admin_client):
    running = make("running")
    html = admin_client.get(
        reverse("admin:django_pgqueue_job_change", args=[running.pk])
    ).content.decode()
    assert "deletelink" not in html
    response = admin_client.post(
        reverse("admin:django_pgqueue_job_delete", args=[running.pk]), {"post": "yes"}
    )
    assert response.status_code == 403
    assert Job.objects.filter(pk=running.pk).exists()


# ----- actions ----------------------------------------------------------------------------


def test_retry_action_retries_dead_failed_and_cancelled_and_explains_the_rest(admin_client):
    dead, dead2, fail, cancelled = make("dead"), make("dead"), failed(), make("cancelled")
    running, done, fresh = make("running"), make("completed"), make("pending")
    # Another active job uses the unique key of this dead one: retrying it would duplicate.
    blocked = make("dead", unique_key="k1")
    make("pending", unique_key="k1")
    selected = [dead, dead2, fail, cancelled, running, done, fresh, blocked]
    response = action(admin_client, "retry_jobs", selected)
    assert response.status_code == 200
    for job in (dead, dead2, fail, cancelled):
        job.refresh_from_db()
        assert (job.status, job.attempts, job.finished_at) == ("pending", 0, None)
        assert job.run_after <= timezone.now()
    assert status_of(running, done, fresh, blocked) == ["running", "completed", "pending", "dead"]
    text = messages_of(response)
    ids = ", ".join(f"#{j.pk}" for j in (dead, dead2, fail, cancelled))
    assert f"Retried 4 jobs, now pending and runnable: {ids}." in text
    skipped = next(m for m in text if m.startswith("Skipped"))
    assert skipped.startswith("Skipped 4 jobs: ")
    assert f"#{running.pk} (running: a worker has it)" in skipped
    assert f"#{done.pk} (completed)" in skipped
    assert f"#{fresh.pk} (pending and never failed)" in skipped
    assert f"#{blocked.pk} (its unique key is in use by another active job)" in skipped
    # Pending jobs show in the list the action redirected to.
    pending = listed_ids(admin_client.get(CHANGELIST, {"status": "pending"}))
    assert {dead.pk, dead2.pk, fail.pk, cancelled.pk} <= set(pending)
    logged = LogEntry.objects.filter(action_flag=CHANGE, change_message="Retried.")
    retried = sorted(j.pk for j in (dead, dead2, fail, cancelled))
    assert sorted(int(e.object_id) for e in logged) == retried


def test_run_now_action(admin_client):
    later = timezone.now() + timedelta(hours=2)
    scheduled, retrying = make("pending", run_after=later), failed()
    runnable, running, done = make("pending"), make("running"), make("completed")
    runnable_at = Job.objects.get(pk=runnable.pk).run_after
    response = action(admin_client, "run_jobs_now", [scheduled, retrying, runnable, running, done])
    for job in (scheduled, retrying):
        job.refresh_from_db()
        assert job.status == "pending" and job.run_after <= timezone.now()
    # An already runnable job keeps its place in line.
    assert Job.objects.get(pk=runnable.pk).run_after == runnable_at
    text = messages_of(response)
    assert f"Made 2 jobs runnable now: #{scheduled.pk}, #{retrying.pk}." in text
    skipped = next(m for m in text if m.startswith("Skipped"))
    assert f"#{runnable.pk} (already runnable)" in skipped
    assert f"#{running.pk} (running)" in skipped
    assert f"#{done.pk} (finished)" in skipped


def test_cancel_action(admin_client):
    pending, scheduled = make("pending"), make("pending", run_after=timezone.now() + timedelta(1))
    running, dead = make("running"), make("dead")
    asked_before = make("running", cancel_requested_at=timezone.now())
    selected = [pending, scheduled, running, dead, asked_before]
    response = action(admin_client, "cancel_jobs", selected)
    statuses = status_of(pending, scheduled, running, dead)
    assert statuses == ["cancelled", "cancelled", "running", "dead"]
    running.refresh_from_db()
    assert running.cancel_requested_at is not None
    text = messages_of(response)
    assert f"Cancelled 2 jobs: #{pending.pk}, #{scheduled.pk}." in text
    assert f"Asked 1 job to stop (each ends cancelled when it returns): #{running.pk}." in text
    skipped = next(m for m in text if m.startswith("Skipped"))
    assert f"#{asked_before.pk} (running, already asked to stop)" in skipped
    assert f"#{dead.pk} (already finished)" in skipped


def test_running_job_page_shows_progress_and_a_cancel_button(admin_client):
    running = make("running", progress={"done": 40, "total": 160, "message": "rows imported"})
    url = reverse("admin:django_pgqueue_job_change", args=[running.pk])
    html = admin_client.get(url).content.decode()
    assert "40 / 160 (25%) rows imported" in html and "<progress" in html
    assert "/operate/cancel/" in html
    admin_client.post(reverse("admin:django_pgqueue_job_operate", args=[running.pk, "cancel"]))
    running.refresh_from_db()
    assert running.status == "running" and running.cancel_requested_at is not None
    html = admin_client.get(url).content.decode()
    assert "/operate/cancel/" not in html  # asked once
    assert "cancel requested at" in html.lower()


def test_cancelling_a_running_job_needs_the_change_permission(client, django_user_model):
    running = make("running")
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)
    url = reverse("admin:django_pgqueue_job_change", args=[running.pk])
    assert "/operate/cancel/" not in client.get(url).content.decode()
    operate = reverse("admin:django_pgqueue_job_operate", args=[running.pk, "cancel"])
    assert client.post(operate).status_code == 403
    running.refresh_from_db()
    assert running.cancel_requested_at is None


def test_an_action_that_changes_nothing_says_so(admin_client):
    done = make("completed")
    text = messages_of(action(admin_client, "cancel_jobs", [done]))
    assert "No job changed." in text
    assert f"Skipped 1 job: #{done.pk} (already finished)." in text


def test_delete_action_confirms_then_deletes_all_but_running_jobs(admin_client):
    dead, done, running = make("dead"), make("completed"), make("running")
    response = action(admin_client, "delete_selected", [dead, done, running], follow=False)
    assert response.status_code == 200  # the confirmation page
    html = response.content.decode()
    assert "Delete 2 jobs?" in html
    assert f"Running jobs are skipped (a worker has them): #{running.pk}" in html
    assert Job.objects.count() == 3
    confirm = {
        "action": "delete_selected",
        "_selected_action": [dead.pk, done.pk, running.pk],
        "post": "yes",
        "select_across": "0",
    }
    response = admin_client.post(CHANGELIST, confirm, follow=True)
    assert list(Job.objects.values_list("pk", flat=True)) == [running.pk]
    text = messages_of(response)
    assert f"Deleted 2 jobs: #{dead.pk}, #{done.pk}." in text
    assert f"Skipped 1 job: #{running.pk} (running: a worker has it)." in text
    assert LogEntry.objects.filter(action_flag=DELETION).count() == 2


def test_delete_refuses_more_than_the_cap(admin_client, monkeypatch):
    monkeypatch.setattr(admin_actions, "DELETE_CAP", 2)
    jobs = [make("completed") for _ in range(3)]
    response = action(admin_client, "delete_selected", jobs[:1], select_across="1", post="yes")
    assert Job.objects.count() == 3
    assert any("More than 2 jobs selected: nothing deleted" in m for m in messages_of(response))


def test_actions_apply_to_all_matching_jobs_with_select_across(admin_client):
    dead = [make("dead") for _ in range(3)]
    done = make("completed")
    data = {
        "action": "retry_jobs",
        "_selected_action": [dead[0].pk],
        "index": 0,
        "select_across": "1",
    }
    admin_client.post(CHANGELIST + "?status=dead", data)
    assert status_of(*dead, done) == ["pending", "pending", "pending", "completed"]


# ----- permissions ------------------------------------------------------------------------


def test_view_only_staff_sees_jobs_but_no_buttons(staff_client):
    client = staff_client("view_job")
    dead = make("dead")
    response = client.get(CHANGELIST)
    assert response.status_code == 200
    html = response.content.decode()
    assert listed_ids(response) == [dead.pk]
    assert 'name="action"' not in html and "action-select" not in html
    detail = client.get(reverse("admin:django_pgqueue_job_change", args=[dead.pk])).content.decode()
    assert "/operate/" not in detail and "deletelink" not in detail
    dashboard = client.get(DASHBOARD)
    assert dashboard.status_code == 200
    assert "Retry all dead jobs" not in dashboard.content.decode()


@pytest.mark.parametrize("name", ["retry_jobs", "run_jobs_now", "cancel_jobs", "delete_selected"])
def test_forged_action_post_without_permission_is_forbidden(staff_client, name):
    client = staff_client("view_job")
    jobs = [make("dead"), make("pending", run_after=timezone.now() + timedelta(1))]
    before = list(Job.objects.order_by("pk").values_list("pk", "status", "run_after"))
    response = action(client, name, jobs, follow=False, post="yes")
    assert response.status_code == 403
    assert list(Job.objects.order_by("pk").values_list("pk", "status", "run_after")) == before
    assert not LogEntry.objects.exists()


def test_change_permission_allows_operating_but_not_deleting(staff_client):
    client = staff_client("view_job", "change_job")
    dead = make("dead")
    html = client.get(CHANGELIST).content.decode()
    assert 'value="retry_jobs"' in html and 'value="delete_selected"' not in html
    assert action(client, "delete_selected", [dead], follow=False, post="yes").status_code == 403
    assert Job.objects.filter(pk=dead.pk).exists()
    action(client, "retry_jobs", [dead])
    assert status_of(dead) == ["pending"]


def test_delete_permission_allows_deleting_but_not_operating(staff_client):
    client = staff_client("view_job", "delete_job")
    dead = make("dead")
    html = client.get(CHANGELIST).content.decode()
    assert 'value="delete_selected"' in html and 'value="retry_jobs"' not in html
    assert action(client, "retry_jobs", [dead], follow=False).status_code == 403
    assert status_of(dead) == ["dead"]
    action(client, "delete_selected", [dead], post="yes", select_across="0")
    assert not Job.objects.filter(pk=dead.pk).exists()


def test_forged_operate_and_dashboard_posts_without_permission_are_forbidden(staff_client):
    client = staff_client("view_job")
    dead = make("dead")
    url = reverse("admin:django_pgqueue_job_operate", args=[dead.pk, "retry"])
    assert client.post(url).status_code == 403
    assert client.get(RETRY_DEAD, {"queue": "default"}).status_code == 403
    assert client.post(RETRY_DEAD, {"queue": "default"}).status_code == 403
    assert status_of(dead) == ["dead"]


QUEUE_CONTROL = reverse("admin:django_pgqueue_job_queue_control")


def test_dashboard_pauses_and_resumes_a_queue_and_shows_paused_ones_first(admin_client):
    make("pending", queue="emails")
    html = admin_client.get(DASHBOARD).content.decode()
    assert 'value="pause">Pause</button>' in html and "pgqueue-paused-banner" not in html
    response = admin_client.post(QUEUE_CONTROL, {"name": "emails", "operation": "pause"})
    assert response.status_code == 302
    assert Queue.objects.get(name="emails").paused
    response = admin_client.get(DASHBOARD)
    html = response.content.decode()
    assert "Paused: emails." in html and "Resume emails</button>" in html
    assert 'class="pgqueue-queue pgqueue-queue-paused" data-queue="emails"' in html
    assert any("Paused queue “emails”" in m for m in messages_of(response))
    # A paused queue with no job at all is still shown (in the banner).
    admin_client.post(QUEUE_CONTROL, {"name": "empty", "operation": "pause"})
    assert "Paused: emails, empty." in admin_client.get(DASHBOARD).content.decode()
    admin_client.post(QUEUE_CONTROL, {"name": "emails", "operation": "resume"})
    admin_client.post(QUEUE_CONTROL, {"name": "empty", "operation": "resume"})
    assert not Queue.objects.exists()
    response = admin_client.post(QUEUE_CONTROL, {"name": "", "operation": "pause"}, follow=True)
    assert "No such queue operation." in messages_of(response)
    assert admin_client.get(QUEUE_CONTROL).status_code == 405


def test_dashboard_shows_a_queues_limits(admin_client):
    from django_pgqueue import limit_queue

    make("pending", queue="reports")
    limit_queue("reports", concurrency_limit=4, rate_limit="10/s")
    html = admin_client.get(DASHBOARD).content.decode()
    assert "at most 4 running, 10/s" in html
    limit_queue("reports")


def test_pausing_a_queue_needs_the_change_permission(staff_client):
    client = staff_client("view_job")
    make("pending", queue="emails")
    assert 'value="pause"' not in client.get(DASHBOARD).content.decode()
    assert client.post(QUEUE_CONTROL, {"name": "emails", "operation": "pause"}).status_code == 403
    assert not Queue.objects.exists()


def test_staff_without_job_permissions_sees_nothing(staff_client):
    client = staff_client()
    make("dead")
    assert client.get(CHANGELIST).status_code == 403
    assert client.get(DASHBOARD).status_code == 403
    assert client.post(RETRY_DEAD, {"queue": "default"}).status_code == 403
    assert "Job queue dashboard" not in client.get(reverse("admin:index")).content.decode()


def test_anonymous_users_are_sent_to_the_login_page(client):
    for url in (CHANGELIST, DASHBOARD, RETRY_DEAD):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_action_posts_need_the_csrf_token(superuser):
    client = Client(enforce_csrf_checks=True)
    client.force_login(superuser)
    dead = make("dead")
    assert action(client, "retry_jobs", [dead], follow=False).status_code == 403
    url = reverse("admin:django_pgqueue_job_operate", args=[dead.pk, "retry"])
    assert client.post(url).status_code == 403
    assert client.post(RETRY_DEAD, {"queue": "default"}).status_code == 403
    assert status_of(dead) == ["dead"]


# ----- the dashboard -----------------------------------------------------------------------


def test_dashboard_is_linked_from_the_changelist_and_the_app_page(admin_client):
    """On any admin site; the index links it on ours (test_our_admin_site_links_...)."""
    assert f'href="{DASHBOARD}"' in admin_client.get(CHANGELIST).content.decode()
    app_index = reverse("admin:app_list", args=["django_pgqueue"])
    assert f'href="{DASHBOARD}"' in admin_client.get(app_index).content.decode()
    # Django's own site and index template, untouched by importing the admin.
    assert f'href="{DASHBOARD}"' not in admin_client.get(reverse("admin:index")).content.decode()


def test_dashboard_shows_each_queue_with_its_numbers(admin_client):
    now = timezone.now()
    make("pending", run_after=now - timedelta(minutes=3))
    make("pending", run_after=now + timedelta(hours=1))
    make("running")
    make("completed", finished_at=now - timedelta(seconds=20))
    make("completed", finished_at=now - timedelta(minutes=20))
    make("dead", queue="emails", name=WELCOME)
    Worker.objects.create(
        worker_id="web-1:123:abc", hostname="web-1", pid=123, queues=["emails"], threads=4
    )
    response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    report = response.context["report"]
    default = report.queue("default")
    assert (default.runnable.value, default.scheduled.value, default.running.value) == (1, 1, 1)
    assert (default.completed.value, default.dead.value) == (2, 0)
    assert default.completed_last_minute.value == 1 and default.completed_last_hour.value == 2
    # (The database's now() is the test transaction's start, a moment ago.)
    assert 170 <= default.oldest_runnable_age.total_seconds() < 240
    emails = report.queue("emails")
    assert (emails.dead.value, emails.workers, emails.threads) == (1, 1, 4)
    html = response.content.decode()
    assert 'data-queue="default"' in html and 'data-queue="emails"' in html
    assert re.search(r">[23]m \d\ds<", html)  # the oldest runnable job's age
    assert "web-1:123:abc" in html and "pgqueue-worker-running" in html
    assert "Every number is an exact count" in html
    # One retry button, for the queue that has dead jobs.
    assert html.count("Retry all dead jobs in this queue") == 1
    assert f"{RETRY_DEAD}?queue=emails" in html
    assert f"{CHANGELIST}?queue=emails&amp;status=dead" in html
    # The chart: 60 minutes, a completed bar, a failure bar (the dead job's last attempt).
    assert html.count('class="pgqueue-bar-minute"') == 60
    assert 'class="pgqueue-bar-completed"' in html and 'class="pgqueue-bar-failed"' in html
    assert "Last hour: 2 completed, 1 failed attempt<" in html
    assert "<script" not in html.split('id="pgqueue-chart"')[1].split("</svg>")[0]


def test_dashboard_marks_estimates_on_big_tables(admin_client, monkeypatch):
    monkeypatch.setattr(stats.limits, "EXACT_TABLE_BYTES", 0)
    monkeypatch.setattr(stats.limits, "COUNT_CAP", 2)
    for _ in range(4):
        make("dead")
    make("completed")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgqueue_job")
    response = admin_client.get(DASHBOARD)
    html = response.content.decode()
    default = response.context["report"].queue("default")
    assert default.dead.kind == "estimate" and default.dead.value == 4
    assert default.completed.kind == "estimate"
    assert 'class="pgqueue-num pgqueue-approx pgqueue-has-dead"' in html
    assert "~4" in html
    assert "marks an estimate from PostgreSQL" in html


def test_retry_dead_in_one_queue_asks_then_retries(admin_client):
    emails = [make("dead", queue="emails", name=WELCOME) for _ in range(2)]
    other = make("dead", queue="default")
    blocked = make("dead", queue="emails", unique_key="u")
    make("pending", queue="emails", unique_key="u")
    response = admin_client.get(RETRY_DEAD, {"queue": "emails"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Every dead job of queue <strong>emails</strong> (3)" in html
    assert status_of(*emails) == ["dead", "dead"]  # a GET changes nothing
    response = admin_client.post(RETRY_DEAD, {"queue": "emails"}, follow=True)
    assert response.redirect_chain[-1][0] == DASHBOARD
    assert status_of(*emails, other, blocked) == ["pending", "pending", "dead", "dead"]
    text = messages_of(response)
    ids = ", ".join(f"#{j.pk}" for j in emails)
    retried = f"Retried 2 jobs (every dead job of queue “emails”), now pending and runnable: {ids}."
    assert retried in text
    assert f"Skipped 1 job: #{blocked.pk} (its unique key is in use by another active job)." in text


def test_retry_dead_without_a_queue_goes_back(admin_client):
    response = admin_client.post(RETRY_DEAD, {}, follow=True)
    assert response.redirect_chain[-1][0] == DASHBOARD
    assert "No queue given." in messages_of(response)


# ----- counting big lists ---------------------------------------------------------------


def test_changelist_count_is_capped_then_estimated(admin_client, monkeypatch):
    monkeypatch.setattr(stats.limits, "COUNT_CAP", 5)
    monkeypatch.setattr(pgqueue_admin.JobAdmin, "list_per_page", 3)
    for _ in range(12):
        make("completed")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgqueue_job")
    response = admin_client.get(CHANGELIST)
    paginator = response.context["cl"].paginator
    assert paginator.counted == stats.Count(12, "estimate")
    html = response.content.decode()
    assert "~12 jobs" in html and "(estimate)" in html
    assert len(listed_ids(response)) == 3
    # A short filtered list is counted exactly, from the page itself.
    make("dead")
    response = admin_client.get(CHANGELIST, {"status": "dead"})
    assert response.context["cl"].paginator.counted == stats.Count(1)
    assert "(estimate)" not in response.content.decode()


# ----- the admin index -----------------------------------------------------------------------


def test_importing_the_admin_changes_nothing_global():
    from django.contrib import admin

    assert pgqueue_admin.JobAdmin  # imported, and registered
    assert admin.site.index_template is None
    assert not isinstance(admin.site, PgQueueAdminSite)


def test_our_admin_site_links_the_dashboard_from_its_index(superuser, rf):
    site = PgQueueAdminSite(name="pgqueue_site")
    site.register(Job, pgqueue_admin.JobAdmin)
    request = rf.get("/admin/")
    request.user = superuser
    response = site.index(request)
    html = response.render().content.decode()
    assert "Job queue dashboard" in html
    assert reverse("admin:django_pgqueue_job_dashboard") in html
    assert PgQueueAdminConfig.default_site == "django_pgqueue.admin_site.PgQueueAdminSite"
