from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from django_pgqueue.models import Job
from shop.jobs import send_order_confirmation
from shop.models import Order, Store, WebhookEndpoint
from shop.services import place_order

pytestmark = pytest.mark.django_db


@pytest.fixture
def store():
    return Store.objects.create(name="Acme", slug="acme")


def test_index_shows_the_order_form(client, store):
    response = client.get(reverse("shop:index"))
    assert response.status_code == 200
    assert b"Place an order" in response.content
    assert b"Acme" in response.content


def test_placing_an_order_enqueues_its_confirmation(client, store, captured_jobs):
    response = client.post(
        reverse("shop:index"),
        {"store": store.pk, "customer_email": "ada@example.com", "total": "12.50"},
    )
    assert response.status_code == 302
    order = Order.objects.get()
    assert order.total == Decimal("12.50")
    # captured_jobs (django_pgqueue.testing's fixture): what was enqueued, without a worker.
    assert captured_jobs.names == [
        "shop.jobs.send_order_confirmation",
        "shop.jobs.send_review_request",
    ]
    confirmation = captured_jobs.get(send_order_confirmation)
    assert (confirmation.args, confirmation.queue) == ([order.pk], "emails")
    assert Job.objects.get(pk=confirmation.id).is_runnable


def test_an_order_runs_end_to_end(client, store, run_jobs, mailoutbox):
    """run_jobs (django_pgqueue.testing's fixture) runs the jobs through the worker's code, in
    the test's transaction, retries included."""
    WebhookEndpoint.objects.create(store=store, url="https://hooks.acme.invalid/orders")
    client.post(
        reverse("shop:index"),
        {"store": store.pk, "customer_email": "ada@example.com", "total": "9.99"},
    )
    ran = run_jobs()
    assert ran.names == ["shop.jobs.send_order_confirmation", "shop.jobs.deliver_webhook"]
    assert [m.to for m in mailoutbox] == [["ada@example.com"]]
    assert Order.objects.get().confirmation_sent_at is not None
    # The webhook's host does not resolve: three attempts, then dead.
    assert [a.outcome for a in ran if a.name == "shop.jobs.deliver_webhook"] == [
        "retried",
        "retried",
        "dead",
    ]
    # The review request is scheduled three days out: it runs only when asked.
    assert run_jobs() == []
    (review,) = run_jobs(scheduled=True)
    assert review.name == "shop.jobs.send_review_request"
    assert mailoutbox[-1].subject == "How was your order from Acme?"


def test_review_request_is_scheduled_three_days_later(store):
    before = timezone.now()
    order = place_order(store, "ada@example.com", Decimal("5"))
    review = Job.objects.get(name="shop.jobs.send_review_request")
    assert review.args == [order.pk]
    assert review.run_after >= before + timedelta(days=3)
    assert not review.is_runnable
    assert Job.objects.scheduled().filter(pk=review.pk).exists()


def test_order_and_its_jobs_roll_back_together(store):
    WebhookEndpoint.objects.create(store=store, url="https://hooks.example.com/")
    with pytest.raises(RuntimeError), transaction.atomic():
        place_order(store, "ada@example.com", Decimal("5"))
        assert Job.objects.count() == 3  # confirmation, review request, webhook
        raise RuntimeError("the payment failed after the order was created")
    assert not Order.objects.exists()
    assert not Job.objects.exists()


def test_an_invalid_order_enqueues_nothing(client, store):
    response = client.post(
        reverse("shop:index"), {"store": store.pk, "customer_email": "nope", "total": "1"}
    )
    assert response.status_code == 200
    assert not Order.objects.exists()
    assert not Job.objects.exists()


def test_report_rebuild_gets_the_store_concurrency_key(client, store):
    response = client.post(reverse("shop:rebuild-report", args=[store.pk]))
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.name == "shop.jobs.rebuild_store_report"
    assert job.concurrency_key == f"store-report:{store.pk}"
    assert job.queue == "reports"


def test_search_index_rebuild_is_enqueued_once(client):
    client.post(reverse("shop:rebuild-index"))
    response = client.post(reverse("shop:rebuild-index"), follow=True)
    assert Job.objects.filter(name="shop.jobs.rebuild_search_index").count() == 1
    assert b"already waiting" in response.content
