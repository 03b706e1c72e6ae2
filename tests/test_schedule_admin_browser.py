"""The Schedule admin in a real browser (headless Chromium, as test_admin_browser.py):
list, the edit page's preview, Run now, and what an edited code schedule looks like."""

from __future__ import annotations

from django.urls import reverse

from django_pgqueue.models import Job, Schedule
from django_pgqueue.schedules.declaration import Declaration
from django_pgqueue.schedules.sync import sync
from tests.test_admin_browser import (  # noqa: F401  (fixtures)
    expect,
    log_in,
    operator,
    page,
    pytestmark,
    shot,
)


def test_schedules_list_preview_run_now_and_reset_to_code(page, live_server, operator, tmp_path):  # noqa: F811
    Schedule.objects.create(
        name="nightly report",
        job="tests.testapp.jobs.noop",
        cron="0 3 * * *",
        timezone="Europe/Paris",
    )
    sync(
        declarations=[
            Declaration(job="tests.testapp.jobs.record", every=30.0, args=["/dev/null", "x"])
        ]
    )
    Schedule.objects.filter(source="code").update(every=120.0)  # edited in the admin
    listing = reverse("admin:django_pgqueue_schedule_changelist")
    log_in(page, live_server, listing)
    expect(page.locator("#result_list")).to_contain_text("At 03:00 every day (Europe/Paris)")
    expect(page.locator("#result_list")).to_contain_text("edited: differs from code in every")
    shot(page, tmp_path, "schedules-list")

    page.get_by_role("link", name="nightly report").click()
    expect(page.locator(".pgqueue-preview li")).to_have_count(5)
    shot(page, tmp_path, "schedule-page")
    page.get_by_role("button", name="Run now").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text(
        "ightly report: enqueued job #"
    )
    assert Job.objects.filter(schedule="nightly report").count() == 1

    page.goto(live_server.url + listing)
    page.get_by_role("link", name="tests.testapp.jobs.record").first.click()
    page.get_by_role("button", name="Reset to code").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("reset to the code's values")
    assert Schedule.objects.get(source="code").every == 30.0
