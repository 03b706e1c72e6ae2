"""Bad input to the job admin: every request value is searched as text, ignored, 404 or 400,
never a 500; rows Python can't decode render with their raw value shown safely.

The enqueue edge is in ``test_bad_input.py``, the commands in ``test_bad_input_commands.py``.
"""

from __future__ import annotations

import pytest
from django.contrib import admin as django_admin
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_pgqueue.admin.formatting import SHOW_MAX
from django_pgqueue.admin.search import MAX_SEARCH_TERMS
from django_pgqueue.models import Job, Schedule

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_pgqueue_job_changelist")
DASHBOARD = reverse("admin:django_pgqueue_job_dashboard")
RETRY_DEAD = reverse("admin:django_pgqueue_job_retry_dead")
ADD = "tests.testapp.jobs.add"


def make(**fields) -> Job:
    return Job.objects.create(**{"name": ADD, "args": [1, 2], **fields})


def listed_ids(response) -> set[int]:
    return {job.pk for job in response.context["cl"].result_list}


# ----- search: terms that are numbers only to Python are searched as text --------------------


@pytest.mark.parametrize(
    "term",
    ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "-0", "²", "٤٢", "#٤٢", "0x10"],
)
def test_search_term_json_cannot_hold_is_searched_as_text(admin_client, term):
    wanted = make(args=[term])
    in_kwargs = make(name="tests.testapp.jobs.send_welcome", args=[], kwargs={"user": term})
    other = make(args=["something else"])
    response = admin_client.get(CHANGELIST, {"q": term})
    assert response.status_code == 200
    assert listed_ids(response) == {wanted.pk, in_kwargs.pk}
    assert other.pk not in listed_ids(response)


@pytest.mark.parametrize("digits", [19, 20, 30, 4300, 5000])
def test_search_for_a_huge_integer(admin_client, digits):
    """Python reads at most 4,300 digits as an int; longer, the term is only text."""
    stored = make(args=[int("9" * digits)] if digits <= 4300 else ["9" * digits])
    response = admin_client.get(CHANGELIST, {"q": "9" * digits})
    assert response.status_code == 200
    assert listed_ids(response) == {stored.pk}


def test_search_by_id_takes_only_ascii_digits_within_bigint(admin_client):
    job = make()
    assert listed_ids(admin_client.get(CHANGELIST, {"q": f"#{job.pk}"})) == {job.pk}
    for term in (f"#{2**63}", f"{2**63 - 1}", f"-{job.pk}", f"{job.pk}.0"):
        response = admin_client.get(CHANGELIST, {"q": term})
        assert response.status_code == 200
        assert job.pk not in listed_ids(response)


def test_search_of_2000_terms_takes_the_first_ones_and_says_so(admin_client):
    jobs = [make(args=[f"t{i}"], unique_key=f"u{i}") for i in range(8)]
    words = ["t1", *(f"w{i}" for i in range(1999))]
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(CHANGELIST, {"q": " ".join(words)})
    assert response.status_code == 200
    # Only the first MAX_SEARCH_TERMS words are applied: "t1" and nine words no job has.
    assert listed_ids(response) == set()
    notes = [str(m) for m in get_messages(response.wsgi_request)]
    assert notes == [
        f"Searched for the first {MAX_SEARCH_TERMS} words only; "
        f"{len(words) - MAX_SEARCH_TERMS:,} more were ignored."
    ]
    assert f"up to {MAX_SEARCH_TERMS} words" in response.content.decode()
    # The statement is as long as one of 10 words, not 2,000.
    longest = max(len(q["sql"]) for q in queries.captured_queries)
    with CaptureQueriesContext(connection) as ten:
        admin_client.get(CHANGELIST, {"q": " ".join(words[:MAX_SEARCH_TERMS])})
    assert longest == max(len(q["sql"]) for q in ten.captured_queries)
    # Fewer words than the cap: all of them apply, and nothing is said.
    response = admin_client.get(CHANGELIST, {"q": "t1 u1"})
    assert listed_ids(response) == {jobs[1].pk}
    assert not list(get_messages(response.wsgi_request))


# ----- every request value that could reach SQL ---------------------------------------------

NUL_REQUESTS = [
    ("get", CHANGELIST, {"queue": "a\x00"}),
    ("get", CHANGELIST, {"status": "\x00"}),
    ("get", CHANGELIST, {"name": "\x00"}),
    ("get", CHANGELIST, {"q": "a\x00b"}),
    ("get", CHANGELIST, {"o": "\x00"}),
    ("get", CHANGELIST, {"p": "\x00"}),
    ("get", CHANGELIST, {"created_at__gte": "\x00"}),
    ("get", CHANGELIST, {"a\x00": "1"}),
    ("get", DASHBOARD, {"queue": "a\x00"}),
    ("get", RETRY_DEAD, {"queue": "a\x00"}),
    ("post", RETRY_DEAD, {"queue": "a\x00"}),
    ("post", CHANGELIST, {"action": "retry_jobs", "_selected_action": "1\x00"}),
    ("post", CHANGELIST, {"action": "retry_jobs\x00", "_selected_action": "1"}),
    ("get", CHANGELIST + "%00/change/", {}),
    ("get", CHANGELIST + "1/change/", {"_changelist_filters": "queue=a\x00"}),
    ("post", CHANGELIST + "%00/operate/retry/", {}),
]


@pytest.mark.parametrize(
    ("method", "url", "data"), NUL_REQUESTS, ids=[f"{m} {u} {d}" for m, u, d in NUL_REQUESTS]
)
def test_a_nul_character_anywhere_in_a_request_is_400(admin_client, method, url, data):
    make(queue="a", status="dead", attempts=5, max_attempts=5)
    response = getattr(admin_client, method)(url, data)
    assert response.status_code == 400
    assert Job.objects.get().status == "dead"  # nothing changed


LOOKUPS = [
    # Lookups the list's filters don't make: refused as Django refuses a disallowed lookup.
    ("last_error", "\x01", 400),
    ("name__regex", "[", 400),
    ("id__regex", "(", 400),
    ("args__0__gt", "1", 400),
    ("args__has_key", "x", 400),
    ("priority__gt", "1e400", 400),
    ("id", "99999999999999999999999", 400),
    ("queue__in", "a,b", 400),
    # The filters' own parameters, with values they can't use: ignored, or Django's "?e=1".
    ("status", "bogus", 200),
    ("status", "\x1b[2J", 200),
    ("queue", "q" * 5000, 200),
    ("queue", "\u202e\x1b", 200),
    ("name", "NaN", 200),
    ("created_at__gte", "not a date", 302),
    ("created_at__gte", "0001-01-01", 200),
    ("created_at__lt", "9999-12-31", 200),
    ("finished_at__isnull", "maybe", 200),
    ("o", "abc", 200),
    ("o", "99999999999999999999", 200),
    ("p", "abc", 200),
    ("p", "99999999999999999999", 200),
    ("p", "-1", 200),
    ("all", "x" * 100, 200),
    ("_to_field", "last_error", 400),
]


@pytest.mark.parametrize(
    ("parameter", "value", "status"), LOOKUPS, ids=[f"{p}={v[:20]!r}" for p, v, _ in LOOKUPS]
)
def test_every_query_parameter_of_the_list_is_used_ignored_or_refused(
    admin_client, parameter, value, status
):
    make(queue="a")
    response = admin_client.get(CHANGELIST, {parameter: value})
    assert response.status_code == status


def test_hostile_queue_names_are_shown_escaped_on_the_dashboard_and_confirmation(admin_client):
    hostile = "<script>alert(1)</script>\x1b[2J"
    make(queue=hostile, status="dead", attempts=5, max_attempts=5)
    dashboard = admin_client.get(DASHBOARD).content.decode()
    assert "<script>alert(1)" not in dashboard
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dashboard
    confirm = admin_client.get(RETRY_DEAD, {"queue": hostile})
    assert confirm.status_code == 200
    assert "<script>alert(1)" not in confirm.content.decode()
    admin_client.post(RETRY_DEAD, {"queue": hostile})
    assert Job.objects.get().status == "pending"


@pytest.mark.parametrize("operation", ["retry", "run-now", "cancel"])
@pytest.mark.parametrize(
    "object_id", ["abc", "1.5", "-1", "9" * 30, str(2**63), "٤٢", "1e3", " 1", "0x1"]
)
def test_a_button_for_an_id_that_is_not_one_is_404(admin_client, object_id, operation):
    job = make(status="dead", attempts=5, max_attempts=5)
    response = admin_client.post(f"{CHANGELIST}{object_id}/operate/{operation}/")
    assert response.status_code == 404
    assert Job.objects.get(pk=job.pk).status == "dead"


@pytest.mark.parametrize("object_id", ["abc", "1.5", "-1", "9" * 30, "٤٢"])
@pytest.mark.parametrize("view", ["change", "history", "delete"])
def test_the_job_pages_for_an_id_that_is_not_one_say_it_does_not_exist(
    admin_client, object_id, view
):
    response = admin_client.get(f"{CHANGELIST}{object_id}/{view}/", follow=True)
    assert response.status_code == 200
    assert "doesn\N{RIGHT SINGLE QUOTATION MARK}t exist" in response.content.decode()


@pytest.mark.parametrize("selected", ["abc", "1.5", "-1", "9" * 30, "٤٢", ""])
@pytest.mark.parametrize("action", ["retry_jobs", "delete_selected"])
def test_an_action_on_a_selection_that_is_not_ids_is_400(admin_client, selected, action):
    job = make(status="dead", attempts=5, max_attempts=5)
    data = {"action": action, "_selected_action": [str(job.pk), selected], "post": "yes"}
    response = admin_client.post(CHANGELIST, data)
    assert response.status_code == 400
    assert Job.objects.get(pk=job.pk).status == "dead"


# ----- rows Python can't decode -------------------------------------------------------------


def insert_raw(depth: int, payload: str = "") -> int:
    """A row whose JSON columns are nested ``depth`` deep, written with raw SQL (as another
    program, or a hand, could)."""
    nested = "[" * depth + payload + "]" * depth
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (name, queue, status, args, kwargs, result, errors, progress)"
            " VALUES (%s, 'default', 'dead', %s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb,"
            " %s::jsonb) RETURNING id",
            [ADD, nested, f'{{"deep": {nested}}}', nested, f"[{nested}]", nested],
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize("depth", [11_000, 3_000])
def test_a_row_nested_too_deep_renders_with_its_raw_value_shown_safely(admin_client, depth):
    pk = insert_raw(depth, '"<script>alert(1)</script>"')
    page = admin_client.get(f"{CHANGELIST}{pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<script>alert(1)" not in html
    if depth == 11_000:  # undecodable: shown as PostgreSQL stored it, with a note
        assert "[" * 1000 in html
        assert "&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in html
        assert "Shown as stored" in html
    else:  # decodable, but too deep to print within the page's recursion limit
        assert "&lt;script&gt;" in html or "Nested too deeply to show in full" in html
    listing = admin_client.get(CHANGELIST)
    assert listing.status_code == 200
    assert pk in listed_ids(listing)
    search = admin_client.get(CHANGELIST, {"q": "<script>"})
    assert search.status_code == 200
    for view in ("history", "delete"):
        assert admin_client.get(f"{CHANGELIST}{pk}/{view}/").status_code == 200
    retried = admin_client.post(f"{CHANGELIST}{pk}/operate/retry/", follow=True)
    assert retried.status_code == 200
    assert Job.objects.filter(pk=pk, status="pending").exists()


def test_a_huge_value_is_cut_on_the_page_and_says_so(admin_client):
    job = make(args=["x" * (SHOW_MAX * 3)])
    html = admin_client.get(f"{CHANGELIST}{job.pk}/change/").content.decode()
    assert f"The first {SHOW_MAX:,} of {SHOW_MAX * 3 + 8:,} characters are shown." in html
    assert "x" * (SHOW_MAX + 10) not in html


# ----- the Schedule admin: the same checks ----------------------------------------------------

SCHEDULES = reverse("admin:django_pgqueue_schedule_changelist")


def make_schedule() -> Schedule:
    return Schedule.objects.create(name="nightly", job=ADD, every=3600, args=[1, 2])


@pytest.mark.parametrize(
    ("method", "path", "data", "status"),
    [
        ("get", "", {"q": "a\x00"}, 400),
        ("get", "", {"enabled__exact": "\x00"}, 400),
        ("get", "", {"name__regex": "["}, 400),
        ("get", "", {"args__0__gt": "1"}, 400),
        ("get", "", {"enabled__exact": "1"}, 200),
        ("get", "", {"source__exact": "admin"}, 200),
        ("get", "", {"q": "NaN Infinity 1e400 -0"}, 200),
        ("get", "", {"q": " ".join(f"w{i}" for i in range(2000))}, 200),
        ("post", "", {"action": "enable_schedules", "_selected_action": "abc"}, 400),
        ("post", "abc/operate/run-now/", {}, 404),
        ("post", "1.5/operate/run-now/", {}, 404),
        ("post", "9" * 30 + "/operate/reset-to-code/", {}, 404),
        ("post", "%00/operate/run-now/", {}, 400),
        ("get", "abc/change/", {}, 302),
    ],
)
def test_the_schedule_admin_takes_the_same_care(admin_client, method, path, data, status):
    make_schedule()
    response = getattr(admin_client, method)(SCHEDULES + path, data)
    assert response.status_code == status
    assert not Job.objects.exists()


def registered_admins() -> list[str]:
    return sorted(
        model._meta.model_name
        for model in django_admin.site._registry
        if model._meta.app_label == "django_pgqueue"
    )


@pytest.mark.parametrize("model_name", registered_admins())
def test_every_admin_of_the_package_checks_its_requests(admin_client, model_name):
    """An admin added later gets the same care, or this fails."""
    changelist = reverse(f"admin:django_pgqueue_{model_name}_changelist")
    assert admin_client.get(changelist).status_code == 200
    assert admin_client.get(changelist, {"q": "\x00"}).status_code == 400
    assert admin_client.get(changelist, {"id__regex": "("}).status_code == 400
    assert admin_client.get(changelist + "%00/change/").status_code == 400
    assert (
        admin_client.post(changelist, {"action": "x", "_selected_action": "a"}).status_code == 400
    )


def test_the_queue_controls_refuse_a_nul(admin_client):
    url = reverse("admin:django_pgqueue_job_queue_control")
    assert admin_client.post(url, {"name": "a\x00", "operation": "pause"}).status_code == 400
    response = admin_client.post(url, {"name": " ", "operation": "pause"}, follow=True)
    assert response.status_code == 200
    assert "No such queue operation." in response.content.decode()
