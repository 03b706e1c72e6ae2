"""The job functions, called inline: ``JobFunction.__call__`` runs the function directly."""

from __future__ import annotations

from decimal import Decimal

import pytest

from django_pgqueue.models import Job
from shop.jobs import (
    SupplierTimeout,
    WebhookFailed,
    deliver_webhook,
    enqueue_report_rebuild,
    rebuild_search_index,
    rebuild_store_report,
    send_newsletter,
    send_order_confirmation,
    sync_inventory,
)
from shop.models import Order, SearchIndex, Store, StoreReport, SupplierSync, WebhookEndpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def store():
    return Store.objects.create(name="Acme", slug="acme")


def test_confirmation_is_sent_once_even_if_the_job_runs_twice(store, mailoutbox):
    order = Order.objects.create(store=store, customer_email="ada@example.com", total=Decimal("3"))
    assert send_order_confirmation(order.pk) == "ada@example.com"
    assert send_order_confirmation(order.pk) == "already sent"
    assert len(mailoutbox) == 1
    assert mailoutbox[0].to == ["ada@example.com"]
    order.refresh_from_db()
    assert order.confirmation_sent_at is not None


def test_inventory_sync_fails_twice_then_succeeds():
    for _ in range(2):
        with pytest.raises(SupplierTimeout):
            sync_inventory("TENT-2P", fail_times=2)
    stock = sync_inventory("TENT-2P", fail_times=2)
    sync = SupplierSync.objects.get(sku="TENT-2P")
    assert sync.calls == 3
    assert sync.stock == stock
    assert sync.synced_at is not None


def test_webhook_fails_until_its_url_is_fixed(store):
    endpoint = WebhookEndpoint.objects.create(store=store, url="https://hooks.shop.invalid/x")
    with pytest.raises(WebhookFailed, match="could not resolve host"):
        deliver_webhook(endpoint.pk, "order.created", {"order": 1})
    endpoint.url = "https://hooks.shop.example/x"
    endpoint.save()
    assert deliver_webhook(endpoint.pk, "order.created", {"order": 1}) == 200
    endpoint.refresh_from_db()
    assert endpoint.deliveries == 1


def test_store_report_totals(store):
    Order.objects.create(store=store, customer_email="a@example.com", total=Decimal("10.00"))
    Order.objects.create(store=store, customer_email="b@example.com", total=Decimal("2.50"))
    assert rebuild_store_report(store.pk) == {"orders": 2, "revenue": "12.50"}
    report = StoreReport.objects.get(store=store)
    assert (report.orders, report.revenue, report.rebuilds, report.rebuilding) == (
        2,
        Decimal("12.50"),
        1,
        0,
    )


def test_report_rebuilds_of_one_store_share_a_concurrency_key(store):
    other = Store.objects.create(name="Other", slug="other")
    a, b = enqueue_report_rebuild(store), enqueue_report_rebuild(store)
    c = enqueue_report_rebuild(other)
    assert a.concurrency_key == b.concurrency_key != c.concurrency_key


def test_search_index_is_a_unique_job():
    first = rebuild_search_index.enqueue()
    second = rebuild_search_index.enqueue()
    assert second.pk == first.pk
    assert second.deduplicated
    assert Job.objects.filter(unique_key="search-index").count() == 1
    assert rebuild_search_index() == 0
    assert SearchIndex.objects.get().rebuilds == 1


def test_newsletter_bulk_enqueue(mailoutbox):
    ids = send_newsletter.enqueue_many(
        [{"email": f"r{i}@example.com", "issue": "Spring"} for i in range(250)]
    )
    assert len(ids) == len(set(ids)) == 250
    jobs = Job.objects.filter(pk__in=ids)
    assert jobs.count() == 250
    assert set(jobs.values_list("queue", "priority").distinct()) == {("emails", -10)}
    send_newsletter("r0@example.com", "Spring")
    assert mailoutbox[0].subject == "Newsletter: Spring"
