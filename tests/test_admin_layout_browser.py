"""Every list of the app fits a laptop's and a desktop's width (headless Chromium, as
test_admin_browser.py): with Django's navigation sidebar and the list's filters shown, neither the
page nor the results box scrolls sideways, and no date or time is broken over lines.

One browser, one load of each list; the viewport is then resized to each width.
PGQUEUE_SCREENSHOTS=/some/dir keeps a screenshot of each list at each width.
"""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from django_pgqueue.models import Job, Schedule
from django_pgqueue.schedules.declaration import Declaration
from django_pgqueue.schedules.sync import sync
from tests.test_admin_browser import (  # noqa: F401  (fixtures)
    WIDTHS,
    dead_job,
    expect,
    log_in,
    operator,
    page,
    pytestmark,
    shot,
    some_history,
)

LONG_NAME = "shop.integrations.warehouse.jobs.synchronise_inventory_levels_for_every_supplier"
LONG_QUEUE = "warehouse-synchronisation-low-priority"
ERROR = (
    "SupplierTimeout: GET https://api.supplier-number-seventeen.invalid/v2/inventory?page=412 "
    "timed out after 30.0 seconds (attempt 3 of 3)"
)

# The list's columns that hold a date or a time, by their field name.
TIME_COLUMNS = {
    "jobs": ("status_column", "when_column"),
    "schedules": ("next_run_column", "last_run_column"),
}

# How the list fits: the page's and the results box's widths, and the date/time cells that break
# over more than one line (each <time> in a cell, or the cell's text if it has none).
MEASURE = """(columns) => {
  const results = document.querySelector('#changelist .results');
  // The lines a node's text takes: its boxes' tops, those less than half a line apart as one
  // (a badge's box and its text are a few pixels apart).
  const lines = (node) => {
    const range = document.createRange();
    range.selectNodeContents(node);
    const half = (parseFloat(getComputedStyle(node).lineHeight) || 16) / 2;
    const tops = [...range.getClientRects()].filter((r) => r.width > 0).map((r) => r.top);
    tops.sort((a, b) => a - b);
    return tops.filter((top, i) => i === 0 || top - tops[i - 1] > half).length;
  };
  const broken = [];
  let cells = 0;
  for (const column of columns) {
    for (const cell of document.querySelectorAll(`#result_list td.field-${column}`)) {
      cells += 1;
      const times = cell.querySelectorAll('time');
      for (const node of times.length ? times : [cell]) {
        // A cell is as tall as its row: only a <time>'s own height tells its lines.
        const height = node === cell ? 0 : node.getBoundingClientRect().height;
        const lineHeight = parseFloat(getComputedStyle(node).lineHeight) || 16;
        if (lines(node) > 1 || height > 1.6 * lineHeight) {
          const text = JSON.stringify(node.textContent.trim());
          broken.push(`${column}: ${text} (${lines(node)} lines)`);
        }
      }
    }
  }
  return {
    page: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
    results: results && [results.scrollWidth, results.clientWidth],
    cells,
    broken,
  };
}"""


def realistic_jobs() -> None:
    """What a busy shop's queue holds: long names and queues, errors, jobs of other days."""
    some_history()
    now = timezone.now()
    traceback = f"Traceback (most recent call last):\n  ...\n{ERROR}"
    long_dead = dead_job(LONG_QUEUE, name=LONG_NAME, last_error=traceback, priority=-20)
    Job.objects.create(
        name=LONG_NAME,
        queue=LONG_QUEUE,
        status="pending",
        attempts=2,
        max_attempts=10,
        run_after=now + timedelta(minutes=7),
        last_error=traceback,
    )
    Job.objects.create(
        name="shop.jobs.send_order_confirmation_email",
        queue="emails-transactional",
        status="pending",
        priority=50,
        run_after=now + timedelta(days=3),
    )
    cancelled = Job.objects.create(
        name="shop.jobs.rebuild_search_index",
        status="cancelled",
        attempts=1,
        started_at=now - timedelta(days=2, hours=3),
        finished_at=now - timedelta(days=2),
        last_error="Traceback...\nJobCancelled: cancelled by the operator",
    )
    old = now - timedelta(days=9, hours=5)
    Job.objects.filter(pk__in=[long_dead.pk, cancelled.pk]).update(created_at=old, run_after=old)
    Job.objects.filter(pk=long_dead.pk).update(
        started_at=old + timedelta(minutes=2), finished_at=old + timedelta(minutes=3)
    )


def realistic_schedules() -> None:
    now = timezone.now()
    Schedule.objects.create(
        name="nightly sales report for the accounting department",
        job="tests.testapp.jobs.noop",
        cron="30 3 * * 1-5",
        timezone="Europe/Paris",
        next_run_at=now + timedelta(hours=5),
        last_run_at=now - timedelta(hours=19),
    )
    Schedule.objects.create(
        name="quarterly archive",
        job="tests.testapp.jobs.noop",
        cron="0 4 1 */3 *",
        timezone="America/Argentina/Buenos_Aires",
        next_run_at=now + timedelta(days=40),
        last_run_at=now - timedelta(days=50),
    )
    Schedule.objects.create(
        name="removed job",
        job="shop.jobs.a_job_that_was_deleted_from_the_code",
        every=3600.0,
        next_run_at=now + timedelta(minutes=12),
    )
    Schedule.objects.create(
        name="paused cleanup", job="tests.testapp.jobs.noop", every=600.0, enabled=False
    )
    sync(declarations=[Declaration(job="tests.testapp.jobs.record", every=30.0, args=["x"])])
    Schedule.objects.filter(source="code").update(every=120.0)  # edited in the admin


def test_every_list_fits_every_width_with_the_filters_shown(page, live_server, operator, tmp_path):  # noqa: F811
    realistic_jobs()
    realistic_schedules()
    lists = {
        "jobs": reverse("admin:django_pgqueue_job_changelist"),
        "schedules": reverse("admin:django_pgqueue_schedule_changelist"),
    }
    problems: list[str] = []
    log_in(page, live_server, lists["jobs"])
    for name, url in lists.items():
        if page.url != live_server.url + url:
            page.goto(live_server.url + url)
        expect(page.locator("#changelist-filter")).to_be_visible()
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            expect(page.locator("#nav-sidebar")).to_be_visible()
            look = page.evaluate(MEASURE, list(TIME_COLUMNS[name]))
            scroll, client = look["page"]
            if scroll > client:
                problems.append(
                    f"{name} at {width}px: the page scrolls sideways ({scroll} > {client})"
                )
            scroll, client = look["results"]
            if scroll > client:
                problems.append(
                    f"{name} at {width}px: the results box scrolls sideways ({scroll} > {client})"
                )
            if not look["cells"]:
                problems.append(f"{name} at {width}px: no cell in {TIME_COLUMNS[name]}")
            problems.extend(f"{name} at {width}px: broken over lines: {b}" for b in look["broken"])
            shot(page, tmp_path, f"{name}-{width}", full_page=False)
    assert not problems, "\n".join(problems)
