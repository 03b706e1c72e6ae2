"""The admin in a real browser: headless Chromium driven by Playwright against a live server.

Needs the system's Chromium (Debian's package; fixture ``chromium_binary`` in tests/tools.py
skips the tests without it) and the ``playwright`` Python package; nothing is downloaded.
Screenshots of each page land in the test's ``tmp_path``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections
from django.urls import reverse
from django.utils import timezone

from django_pgqueue.models import Job, Queue, Schedule, Worker
from django_pgqueue.schedules.declaration import Declaration
from django_pgqueue.schedules.sync import sync

try:
    from playwright.sync_api import Page, expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
PASSWORD = "correct horse battery staple"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(sync_playwright is None, reason="the playwright package is not installed"),
]


@pytest.fixture
def page(chromium_binary, live_server, monkeypatch, tmp_path) -> Iterator[Page]:
    # Playwright's sync API runs an event loop in this thread; the ORM calls made by the test
    # itself (creating rows, checking them) are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    outside: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_binary, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1440, "height": 1000})

        def only_the_live_server(route):
            if route.request.url.startswith(live_server.url):
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        context.route("**/*", only_the_live_server)
        page = context.new_page()
        page.set_default_timeout(20_000)
        try:
            yield page
        finally:
            context.close()
            browser.close()
            # While Playwright runs, the test's ORM calls may get a connection of their own
            # (Django's connections are per context); close it or the test database cannot be
            # dropped at the end of the session.
            connections.close_all()
    # The admin pages fetch nothing from anywhere else (no CDN).
    assert outside == []


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)


def log_in(page: Page, live_server, next_url: str) -> None:
    page.goto(f"{live_server.url}{reverse('admin:login')}?next={next_url}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_url}")


def dead_job(queue: str = "default", **fields) -> Job:
    now = timezone.now()
    traceback = "Traceback (most recent call last):\n  ...\nRuntimeError: SMTP said no"
    values = {
        "name": "tests.testapp.jobs.always_fails",
        "queue": queue,
        "status": "dead",
        "args": ["boom"],
        "attempts": 3,
        "max_attempts": 3,
        "started_at": now - timedelta(seconds=1),
        "finished_at": now,
        "last_error": traceback,
        "errors": [
            {
                "attempt": 3,
                "worker_id": "web-1:4242:ab12",
                "exception_class": "builtins.RuntimeError",
                "traceback": traceback,
                "at": now.isoformat(),
            }
        ],
    }
    values.update(fields)
    return Job.objects.create(**values)


def some_history() -> None:
    """A little of everything, so the pages show what they look like in use."""
    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            name="tests.testapp.jobs.add",
            args=[i, 1],
            status="completed",
            attempts=1,
            started_at=now - timedelta(minutes=i % 60, seconds=1),
            finished_at=now - timedelta(minutes=i % 60),
            result=i + 1,
        )
        for i in range(0, 300, 2)
    )
    Job.objects.create(name="tests.testapp.jobs.noop", status="pending")
    Job.objects.create(
        name="tests.testapp.jobs.send_welcome",
        queue="emails",
        kwargs={"user_id": 7},
        status="pending",
        run_after=now + timedelta(hours=1),
    )
    Job.objects.create(
        name="tests.testapp.jobs.record",
        status="running",
        attempts=1,
        locked_at=now,
        locked_by="web-1:4242:ab12",
        started_at=now,
    )
    Worker.objects.create(
        worker_id="web-1:4242:ab12", hostname="web-1", pid=4242, queues=[], threads=4
    )


def shot(page: Page, tmp_path: Path, name: str, full_page: bool = True) -> Path:
    # PGQUEUE_SCREENSHOTS=/some/dir keeps them for a person to look at.
    path = Path(os.environ.get("PGQUEUE_SCREENSHOTS") or tmp_path) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 10_000
    return path


def test_filter_dead_jobs_select_two_and_retry(page, live_server, operator, tmp_path):
    some_history()
    first, second, third = dead_job(), dead_job(), dead_job()
    changelist = reverse("admin:django_pgqueue_job_changelist")
    log_in(page, live_server, changelist)
    shot(page, tmp_path, "1-changelist")

    # Filter to dead jobs with the sidebar filter.
    page.locator("#changelist-filter").get_by_role("link", name="Dead", exact=True).click()
    page.wait_for_url("**status=dead**")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#result_list .pgqueue-status-dead")).to_have_count(3)
    shot(page, tmp_path, "2-changelist-dead")

    page.check(f'input.action-select[value="{first.pk}"]')
    page.check(f'input.action-select[value="{second.pk}"]')
    expect(page.locator(".action-counter")).to_contain_text("2 of 3 selected")
    page.select_option('select[name="action"]', "retry_jobs")
    page.click('button[name="index"]')

    success = page.locator("ul.messagelist li.success")
    expect(success).to_contain_text(f"Retried 2 jobs, now pending and runnable: #{first.pk}")
    # Back on the dead filter: only the job that was not selected is left.
    expect(rows).to_have_count(1)
    expect(page.locator(f'input.action-select[value="{third.pk}"]')).to_be_visible()
    shot(page, tmp_path, "3-after-retry")

    # The two retried jobs are pending in the list.
    page.goto(f"{live_server.url}{changelist}?status=pending")
    for job in (first, second):
        row = page.locator("#result_list tbody tr").filter(
            has=page.locator(f'input.action-select[value="{job.pk}"]')
        )
        expect(row.locator(".pgqueue-status-pending")).to_have_text("Pending")
        expect(row).to_contain_text("0/3")
    shot(page, tmp_path, "4-pending")
    assert {j.status for j in Job.objects.filter(pk__in=[first.pk, second.pk])} == {"pending"}
    assert Job.objects.get(pk=third.pk).status == "dead"


def test_dashboard_retries_the_dead_jobs_of_one_queue(page, live_server, operator, tmp_path):
    some_history()
    emails = [dead_job("emails", name="tests.testapp.jobs.send_welcome") for _ in range(2)]
    default = dead_job()
    changelist = reverse("admin:django_pgqueue_job_changelist")
    log_in(page, live_server, changelist)

    page.get_by_role("link", name="Queue dashboard").click()
    page.wait_for_url("**/dashboard/")
    emails_row = page.locator('tr[data-queue="emails"]')
    expect(emails_row.locator(".pgqueue-has-dead")).to_have_text("2")
    expect(page.locator("#pgqueue-workers")).to_contain_text("web-1:4242:ab12")
    expect(page.locator("svg.pgqueue-chart .pgqueue-bar-completed").first).to_be_visible()
    shot(page, tmp_path, "5-dashboard")

    emails_row.get_by_role("link", name="Retry all dead jobs in this queue…").click()
    expect(page.locator("#content-main")).to_contain_text("Every dead job of queue emails (2)")
    shot(page, tmp_path, "6-retry-dead-confirmation")
    page.get_by_role("button", name="Yes, retry them").click()

    page.wait_for_url("**/dashboard/")
    expect(page.locator("ul.messagelist li.success")).to_contain_text(
        "Retried 2 jobs (every dead job of queue “emails”)"
    )
    expect(emails_row.locator(".pgqueue-retry-dead")).to_have_count(0)
    expect(page.locator('tr[data-queue="default"] .pgqueue-retry-dead')).to_have_count(1)
    shot(page, tmp_path, "7-dashboard-after-retry")
    assert [j.status for j in Job.objects.filter(pk__in=[e.pk for e in emails])] == [
        "pending",
        "pending",
    ]
    assert Job.objects.get(pk=default.pk).status == "dead"


def test_running_job_page_shows_progress_and_cancels(page, live_server, operator, tmp_path):
    now = timezone.now()
    job = Job.objects.create(
        name="tests.testapp.jobs.until_cancelled",
        args=["/tmp/unused"],
        status="running",
        attempts=1,
        locked_at=now,
        locked_by="web-1:4242:ab12",
        started_at=now,
        progress={"done": 300, "total": 1200, "message": "rows imported"},
    )
    url = reverse("admin:django_pgqueue_job_change", args=[job.pk])
    log_in(page, live_server, url)
    expect(page.locator(".field-progress_column")).to_contain_text("300 / 1200 (25%)")
    expect(page.locator("progress.pgqueue-progress")).to_have_count(1)
    shot(page, tmp_path, "10-running-job")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Asked 1 job to stop")
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
    job.refresh_from_db()
    assert job.status == "running" and job.cancel_requested_at is not None


def test_dashboard_pauses_a_queue_prominently_and_resumes_it(page, live_server, operator, tmp_path):
    some_history()
    dashboard = reverse("admin:django_pgqueue_job_dashboard")
    log_in(page, live_server, dashboard)
    emails_row = page.locator('tr[data-queue="emails"]')
    emails_row.get_by_role("button", name="Pause").click()
    page.wait_for_url("**/dashboard/")
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Paused queue “emails”")
    expect(page.locator("#pgqueue-paused")).to_contain_text("Paused: emails.")
    expect(emails_row.locator(".pgqueue-status-paused")).to_have_text("Paused")
    assert Queue.objects.get(name="emails").paused
    shot(page, tmp_path, "11-dashboard-paused")
    page.locator("#pgqueue-paused").get_by_role("button", name="Resume emails").click()
    page.wait_for_url("**/dashboard/")
    expect(page.locator("#pgqueue-paused")).to_have_count(0)
    expect(emails_row.get_by_role("button", name="Pause")).to_be_visible()
    assert not Queue.objects.exists()


def test_job_page_shows_the_traceback_and_retries(page, live_server, operator, tmp_path):
    job = dead_job(kwargs={"user_id": 42, "template": "welcome"})
    url = reverse("admin:django_pgqueue_job_change", args=[job.pk])
    log_in(page, live_server, url)
    expect(page.locator(".pgqueue-traceback").first).to_contain_text("RuntimeError: SMTP said no")
    expect(page.locator(".field-kwargs_json pre")).to_contain_text('"user_id": 42')
    expect(page.locator('input[name="_save"]')).to_have_count(0)
    shot(page, tmp_path, "8-job")
    page.get_by_role("button", name="Retry now").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Retried 1 job")
    expect(page.locator(".pgqueue-status")).to_have_text("Pending")
    shot(page, tmp_path, "9-job-after-retry")


WEBHOOK_ERROR = (
    "ConnectionError: POST https://hooks.coffee-corner.invalid/orders (order.created): "
    "could not resolve host 'hooks.coffee-corner.invalid'"
)


def fully_shown(page: Page, selector: str) -> None:
    """``selector`` is in the viewport and not clipped by the list's scrolling container."""
    element = page.locator(selector)
    expect(element).to_be_visible()
    expect(element).to_be_in_viewport(ratio=1)
    box = element.bounding_box()
    results = page.locator("#changelist .results").bounding_box()
    assert box and results
    assert results["x"] <= box["x"] and box["x"] + box["width"] <= results["x"] + results["width"]


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_error_reads_at_a_laptops_width_and_wider(page, live_server, operator, tmp_path, width):
    """With Django's navigation sidebar and the filters open, the list keeps the error in view;
    a completed job keeps its earlier failures quiet; scheduled jobs have their own badge."""
    some_history()
    traceback = f"Traceback (most recent call last):\n  ...\n{WEBHOOK_ERROR}"
    dead = dead_job("webhooks", name="shop.jobs.deliver_webhook", last_error=traceback)
    now = timezone.now()
    recovered = Job.objects.create(
        name="shop.jobs.sync_inventory",
        status="completed",
        attempts=3,
        started_at=now,
        finished_at=now,
        result=42,
        last_error="Traceback...\nSupplierTimeout: timed out",
        errors=[
            {
                "attempt": n,
                "worker_id": "web-1:4242:ab12",
                "exception_class": "shop.jobs.SupplierTimeout",
                "traceback": "Traceback...\nSupplierTimeout: timed out",
                "at": now.isoformat(),
            }
            for n in (1, 2)
        ],
    )
    page.set_viewport_size({"width": width, "height": 900})
    changelist = reverse("admin:django_pgqueue_job_changelist")
    log_in(page, live_server, changelist)
    expect(page.locator("#nav-sidebar")).to_be_visible()
    expect(page.locator("#changelist-filter")).to_be_visible()

    dead_row = f'#result_list tr:has(input[value="{dead.pk}"])'
    expect(page.locator(f"{dead_row} .pgqueue-error")).to_have_text(WEBHOOK_ERROR)
    fully_shown(page, f"{dead_row} .pgqueue-error")
    fully_shown(page, f"{dead_row} .pgqueue-status-dead")
    done_row = f'#result_list tr:has(input[value="{recovered.pk}"])'
    expect(page.locator(f"{done_row} .pgqueue-error")).to_have_count(0)
    expect(page.locator(f"{done_row} .pgqueue-error-note")).to_have_text(
        "completed after 2 failed attempts"
    )
    expect(page.locator("#result_list .pgqueue-status-scheduled")).to_have_text("Scheduled")
    shot(page, tmp_path, f"11-changelist-{width}", full_page=False)  # what a person sees

    page.goto(f"{live_server.url}{reverse('admin:django_pgqueue_job_change', args=[dead.pk])}")
    expect(page.locator(".field-last_error_column .pgqueue-traceback")).to_contain_text(
        WEBHOOK_ERROR
    )
    expect(page.locator(".field-last_error_column .pgqueue-traceback")).to_be_in_viewport()
    shot(page, tmp_path, f"12-dead-job-{width}")

    page.goto(f"{live_server.url}{reverse('admin:django_pgqueue_job_change', args=[recovered.pk])}")
    expect(page.get_by_text("Last error")).to_have_count(0)
    history = page.locator("summary", has_text="Failed attempts before it completed (2)")
    expect(history).to_be_visible()
    expect(page.get_by_text("SupplierTimeout: timed out").first).to_be_hidden()  # collapsed
    history.click()
    expect(page.locator(".pgqueue-attempt summary").first).to_contain_text("UTC on web-1:4242")
    shot(page, tmp_path, f"13-completed-job-{width}")


WIDTHS = (1280, 1400, 1920)

# What a person sees of the breadcrumbs bar and of the page's width, at one viewport width.
LOOK = """() => {
  const bar = document.querySelector('.breadcrumbs');
  const style = bar && getComputedStyle(bar);
  return {
    bar: bar && {
      tag: bar.tagName,
      background: style.backgroundColor,
      padding: style.padding,
      margin: style.margin,
      listStyle: style.listStyleType,
      numbered: [...bar.querySelectorAll('li')]
        .map((li) => getComputedStyle(li))
        .some((li) => li.display === 'list-item' && li.listStyleType !== 'none'),
    },
    page: [document.documentElement.scrollWidth, window.innerWidth],
  };
}"""


def test_every_page_has_the_admins_breadcrumbs_and_fits_the_width(
    page, live_server, operator, tmp_path
):
    """On the Django that renders them (5.2, 6.0 or 6.1), the app's own pages have the admin's
    breadcrumbs bar, not a numbered list; no page scrolls sideways at a laptop's and a
    desktop's widths."""
    some_history()
    dead = dead_job(kwargs={"user_id": 42, "template": "welcome"})
    dead_job("webhooks", name="shop.jobs.deliver_webhook", last_error=f"Traceback\n{WEBHOOK_ERROR}")
    nightly = Schedule.objects.create(
        name="nightly report",
        job="tests.testapp.jobs.noop",
        cron="0 3 * * *",
        timezone="Europe/Paris",
    )
    sync(declarations=[Declaration(job="tests.testapp.jobs.record", every=30.0, args=["x"])])
    jobs = reverse("admin:django_pgqueue_job_changelist")
    log_in(page, live_server, jobs)
    # The reference: the breadcrumbs bar of a page that Django's own template renders.
    admins = page.evaluate(LOOK)["bar"]
    assert admins and not admins["numbered"]

    problems: list[str] = []

    def looks_right(name: str) -> None:
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            look = page.evaluate(LOOK)
            if look["bar"] != admins:
                problems.append(f"{name} at {width}px: breadcrumbs {look['bar']} != {admins}")
            scroll, inner = look["page"]
            if scroll > inner:
                problems.append(f"{name} at {width}px: the page scrolls sideways ({scroll})")
            shot(page, tmp_path, f"look-{name}-{width}", full_page=False)

    looks_right("jobs")
    page.check(f'input.action-select[value="{dead.pk}"]')
    page.select_option('select[name="action"]', "delete_selected")
    page.click('button[name="index"]')
    expect(page.get_by_role("button", name="Yes, delete")).to_be_visible()
    looks_right("delete-confirmation")
    pages = {
        "job": reverse("admin:django_pgqueue_job_change", args=[dead.pk]),
        "dashboard": reverse("admin:django_pgqueue_job_dashboard"),
        "retry-dead-confirmation": reverse("admin:django_pgqueue_job_retry_dead")
        + "?queue=default",
        "schedules": reverse("admin:django_pgqueue_schedule_changelist"),
        "schedule": reverse("admin:django_pgqueue_schedule_change", args=[nightly.pk]),
        "app": reverse("admin:app_list", args=["django_pgqueue"]),
    }
    for name, url in pages.items():
        page.goto(live_server.url + url)
        looks_right(name)
    assert not problems, "\n".join(problems)
