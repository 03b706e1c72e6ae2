"""How the admin shows a job: the last error where it can be read, a completed job's earlier
failures kept quiet, one way to write times, scheduled jobs told apart from runnable ones.
(The same pages in a real browser at 1280 and 1920 px: test_admin_browser.py.)"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from django_pgqueue.admin.formatting import exact_time
from tests.test_admin import CHANGELIST, FAILS, TRACEBACK, failed, make

pytestmark = pytest.mark.django_db


def page(admin_client, job) -> str:
    response = admin_client.get(reverse("admin:django_pgqueue_job_change", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def row_of(html: str, job) -> str:
    match = re.search(rf'<tr>(?:(?!</tr>).)*value="{job.pk}"(?:(?!</tr>).)*</tr>', html, flags=re.S)
    assert match, f"no row for #{job.pk}"
    return match.group(0)


def test_the_last_error_is_under_the_job_name_in_red_while_it_matters(admin_client):
    dead = make("dead")
    retrying = failed()
    html = admin_client.get(CHANGELIST).content.decode()
    for job in (dead, retrying):
        name_cell = re.search(
            r'<t[hd] class="field-name_column">.*?</t[hd]>', row_of(html, job), re.S
        )
        assert name_cell
        assert (
            '<div class="pgqueue-error">RuntimeError: the mail server said no</div>'
            in name_cell.group(0)
        )


def test_a_long_error_is_cut_but_keeps_its_start(admin_client):
    long = "Traceback (most recent call last):\nConnectionError: " + "x" * 500
    job = make("dead", last_error=long)
    row = row_of(admin_client.get(CHANGELIST).content.decode(), job)
    shown = re.search(r'<div class="pgqueue-error">([^<]*)</div>', row).group(1)
    assert shown.startswith("ConnectionError: xxx") and shown.endswith("…")
    assert len(shown) == 160


def test_a_job_that_completed_after_failures_keeps_them_quiet(admin_client):
    now = timezone.now()
    errors = [
        {"attempt": n, "worker_id": "w:1", "exception_class": "builtins.TimeoutError",
         "traceback": f"Traceback...\nTimeoutError: try {n}", "at": now.isoformat()}
        for n in (1, 2)
    ]  # fmt: skip
    job = make("completed", attempts=3, last_error=TRACEBACK, errors=errors, result=42)
    row = row_of(admin_client.get(CHANGELIST).content.decode(), job)
    assert 'pgqueue-error"' not in row and "the mail server said no" not in row
    assert '<div class="pgqueue-error-note">completed after 2 failed attempts</div>' in row

    html = page(admin_client, job)
    assert "Last error" not in html and "pgqueue-traceback" in html  # only in the history
    # The history is a collapsed fieldset (a <details> closed by default), newest first.
    history = re.search(
        r"<details>\s*<summary>.*?Failed attempts before it completed \(2\)"
        r".*?</details>\s*</fieldset>",
        html,
        re.S,
    )
    assert history and " open" not in history.group(0).split(">", 1)[0]
    assert history.group(0).index("try 2") < history.group(0).index("try 1")


def test_a_dead_job_shows_its_last_error_and_a_collapsed_history(admin_client):
    html = page(admin_client, make("dead"))
    last_error = html.index("Last error")
    assert "RuntimeError: the mail server said no" in html[last_error:]
    assert "Failed attempts (1)" in html


def test_times_are_written_one_way_with_the_zone(admin_client):
    at = timezone.now().replace(microsecond=410_000) - timedelta(days=3)
    job = make(
        "dead",
        created_at=at,
        errors=[
            {"attempt": 3, "worker_id": "w", "exception_class": "builtins.RuntimeError",
             "traceback": TRACEBACK, "at": at.isoformat()}
        ],
    )  # fmt: skip
    html = page(admin_client, job)
    written = exact_time(at)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.410 UTC", written)
    assert f"Attempt 3 at {written} on w" in html  # the history: not ISO any more
    assert written in html  # created at
    assert at.isoformat() not in html.replace(f'datetime="{at.isoformat()}"', "")
    listing = admin_client.get(CHANGELIST).content.decode()
    # The list names the zone in its header, and writes the same time, shorter.
    assert "Created → finished (UTC)" in listing
    short = f"{at:%m-%d %H:%M}" if at.year == timezone.localdate().year else f"{at:%Y-%m-%d}"
    assert f'title="{written}">{short}</time>' in listing
    assert f'title="{written}"' in listing


def test_scheduled_and_awaiting_retry_jobs_have_their_own_badges(admin_client):
    runnable = make("pending")
    scheduled = make("pending", run_after=timezone.now() + timedelta(hours=2))
    retrying = failed()
    html = admin_client.get(CHANGELIST).content.decode()
    assert ">Pending</span>" in row_of(html, runnable)
    assert 'pgqueue-status-scheduled" title="pending: runs at ' in row_of(html, scheduled)
    assert ">Scheduled</span>" in row_of(html, scheduled)
    assert ">Awaiting retry</span>" in row_of(html, retrying)
    assert ">Scheduled</span>" in page(admin_client, scheduled)


def test_a_completed_job_page_hides_an_empty_progress_block(admin_client):
    html = page(admin_client, make("completed"))
    assert "Progress" not in html
    assert "Failed attempts" not in html and "Last error" not in html
    assert FAILS not in html


def test_a_failed_job_made_runnable_by_hand_is_not_awaiting_retry(admin_client):
    # Issue 36: a job retried by hand (runnable now) was listed as awaiting its retry.
    retried, run_now, waiting = failed(), failed(), failed()
    admin_client.post(
        CHANGELIST, {"action": "retry_jobs", "_selected_action": [retried.pk], "index": 0}
    )
    admin_client.post(
        CHANGELIST, {"action": "run_jobs_now", "_selected_action": [run_now.pk], "index": 0}
    )
    for job in (retried, run_now):
        job.refresh_from_db()
        assert job.status == "pending" and job.run_after <= timezone.now() and job.last_error
    assert run_now.attempts == 1  # failed once, and still says so

    html = admin_client.get(CHANGELIST).content.decode()
    for job in (retried, run_now):
        assert ">Pending</span>" in row_of(html, job)
        assert "Awaiting retry" not in row_of(html, job)
        assert "Awaiting retry" not in page(admin_client, job)
        assert ">Pending</span>" in page(admin_client, job)
    assert ">Awaiting retry</span>" in row_of(html, waiting)

    # The status filter's "awaiting retry" lists only the failed job whose next attempt is
    # later; the two runnable ones are under "runnable now".
    awaiting = admin_client.get(CHANGELIST, {"status": "failed"}).content.decode()
    assert f'value="{waiting.pk}"' in awaiting
    assert f'value="{retried.pk}"' not in awaiting and f'value="{run_now.pk}"' not in awaiting
    runnable = admin_client.get(CHANGELIST, {"status": "runnable"}).content.decode()
    assert f'value="{retried.pk}"' in runnable and f'value="{run_now.pk}"' in runnable
    assert f'value="{waiting.pk}"' not in runnable
