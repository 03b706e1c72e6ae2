"""The example end to end: seed_demo's jobs run by a real ``run_jobs`` worker process."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from django_pgqueue.models import Job
from shop.models import Order, SearchIndex, StoreReport, SupplierSync, WebhookEndpoint


def test_demo_batch_runs_to_the_expected_end(run_worker):
    out = io.StringIO()
    call_command("seed_demo", newsletter=50, stdout=out)
    # Every row of its summary counts jobs: they add up to the jobs in the table.
    rows = [line.rsplit(None, 1) for line in out.getvalue().splitlines()]
    counts = {label.strip(): int(n) for label, n in rows}
    assert counts.pop("jobs enqueued") == sum(counts.values()) == Job.objects.count() == 167
    assert counts["search index rebuild (unique: asked 5 times, 4 deduplicated)"] == 1
    run_worker("--threads", "4")

    jobs = Job.objects.all()
    # Every confirmation sent, each order's review request still scheduled three days out.
    assert not Order.objects.filter(confirmation_sent_at__isnull=True).exists()
    reviews = jobs.filter(name="shop.jobs.send_review_request")
    assert reviews.count() == Order.objects.count() == 40
    assert set(reviews.values_list("status", flat=True)) == {"pending"}
    assert jobs.scheduled().count() == 40

    # The flaky supplier: each sync failed twice and then succeeded on its third attempt.
    syncs = jobs.filter(name="shop.jobs.sync_inventory")
    assert set(syncs.values_list("status", "attempts")) == {("completed", 3)}
    assert all(len(job.errors) == 2 for job in syncs)
    assert not SupplierSync.objects.filter(synced_at__isnull=True).exists()

    # Coffee Corner's broken webhook: every delivery dead after 3 attempts; Bookworm's fine.
    dead = jobs.dead()
    assert dead.count() == 5
    assert set(dead.values_list("name", "attempts")) == {("shop.jobs.deliver_webhook", 3)}
    assert all("could not resolve host" in job.last_error for job in dead)
    assert WebhookEndpoint.objects.get(store__slug="bookworm").deliveries == 15

    # Report rebuilds: all done, never two of one store at once.
    reports = jobs.filter(name="shop.jobs.rebuild_store_report")
    assert set(reports.values_list("status", "attempts")) == {("completed", 1)}
    assert sorted(StoreReport.objects.values_list("rebuilds", flat=True)) == [4, 4, 4]

    # The unique job ran once; newsletters and everything else completed.
    assert SearchIndex.objects.get().rebuilds == 1
    assert jobs.exclude(status__in=["completed", "dead"]).count() == 40  # the reviews
    assert jobs.filter(name="shop.jobs.send_newsletter", status="completed").count() == 50
    # The newsletter's batch reported once, when its last email was sent.
    report = jobs.get(name="shop.jobs.report_newsletter")
    assert (report.status, report.result) == (
        "completed",
        "Newsletter 'Autumn best sellers': 50 sent, 0 failed",
    )

    # Fix the endpoint, retry the dead deliveries (the admin's action does this), run again.
    WebhookEndpoint.objects.filter(store__slug="coffee-corner").update(
        url="https://hooks.coffee-corner.example/orders"
    )
    assert len(Job.objects.retry_dead(queue="webhooks")) == 5
    run_worker()
    assert not jobs.dead().exists()
    assert WebhookEndpoint.objects.get(store__slug="coffee-corner").deliveries == 5


@pytest.mark.django_db
def test_seed_demo_fresh_replaces_an_earlier_demo_instead_of_adding_to_it():
    """Issue 36: each `make demo` added its 517 jobs to those of the runs before it."""
    call_command("seed_demo", newsletter=5, stdout=io.StringIO())
    first = (Job.objects.count(), Order.objects.count())
    assert first == (122, 40)
    err = io.StringIO()
    call_command("seed_demo", newsletter=5, fresh=True, stdout=io.StringIO(), stderr=err)
    assert (Job.objects.count(), Order.objects.count()) == first
    assert "deleted the 122 jobs and 40 orders of earlier runs" in err.getvalue()
    # Without --fresh, a run adds to what is there (the unique search rebuild is still waiting).
    call_command("seed_demo", newsletter=5, stdout=io.StringIO())
    assert (Job.objects.count(), Order.objects.count()) == (2 * 122 - 1, 80)
