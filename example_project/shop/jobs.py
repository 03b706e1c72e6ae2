"""The shop's background jobs.

django_pgqueue imports the ``jobs`` module of every installed app when Django starts, so the
worker knows these functions by name. Job arguments are JSON (ids, strings, numbers, lists,
dicts): pass a primary key and load the row in the job, never a model instance.

Delivery is at least once: a worker that dies after a job did its work but before it recorded
the outcome runs the job again later. So each job here is safe to run twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from django_pgqueue import current_job, job
from shop.models import Order, SearchIndex, Store, StoreReport, SupplierSync, WebhookEndpoint

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = logging.getLogger(__name__)


# ----- emails: a queue of its own, so a newsletter never delays a receipt -------------------------


@job(queue="emails", priority=10)
def send_order_confirmation(order_id: int) -> str:
    """Enqueued by ``place_order`` in the same transaction as the order (see services.py)."""
    order = Order.objects.select_related("store").get(pk=order_id)
    if order.confirmation_sent_at is not None:
        return "already sent"  # a second run after a crash sends nothing
    send_mail(
        subject=f"{order.store.name}: order #{order.pk} confirmed",
        message=f"Thank you for your order of ${order.total}. We will ship it soon.",
        from_email=None,
        recipient_list=[order.customer_email],
    )
    Order.objects.filter(pk=order.pk, confirmation_sent_at__isnull=True).update(
        confirmation_sent_at=timezone.now()
    )
    return order.customer_email


@job(queue="emails")
def send_review_request(order_id: int) -> None:
    """Scheduled three days after the order (``run_after``)."""
    order = Order.objects.select_related("store").get(pk=order_id)
    send_mail(
        subject=f"How was your order from {order.store.name}?",
        message="Tell us in one click.",
        from_email=None,
        recipient_list=[order.customer_email],
    )


@job(queue="emails", priority=-10)
def send_newsletter(email: str, issue: str) -> None:
    """Thousands at once with ``enqueue_many``; low priority so receipts go first."""
    send_mail(
        subject=f"Newsletter: {issue}",
        message="This week's best sellers...",
        from_email=None,
        recipient_list=[email],
    )


@job(queue="emails")
def report_newsletter(issue: str) -> str:
    """The newsletter batch's ``on_complete`` (seed_demo, docs/workflows.md): runs once, when
    every email of the issue has been sent or given up on, and says how many were sent."""
    batch = current_job().batch
    counts = batch.counts() if batch is not None else {}
    sent = counts.get("completed", 0)
    failed = counts.get("dead", 0) + counts.get("cancelled", 0)
    report = f"Newsletter {issue!r}: {sent} sent, {failed} failed"
    logger.info(report)
    return report


# ----- a flaky dependency: retried with exponential backoff until it answers ----------------------


class SupplierTimeout(Exception):
    """The supplier's API did not answer in time."""


@job(max_attempts=5)
def sync_inventory(sku: str, fail_times: int = 2) -> int:
    """Fetch the stock of ``sku`` from the supplier, whose (simulated) API times out on the first
    ``fail_times`` calls per SKU. Each failure is retried after PGQUEUE_BACKOFF_BASE * 2**n s."""
    with transaction.atomic():
        sync, _ = SupplierSync.objects.select_for_update().get_or_create(sku=sku)
        sync.calls += 1
        sync.save(update_fields=["calls"])
    if sync.calls <= fail_times:
        raise SupplierTimeout(f"supplier API timed out for {sku} (call {sync.calls})")
    stock = int(hashlib.sha256(sku.encode()).hexdigest(), 16) % 500
    SupplierSync.objects.filter(pk=sync.pk).update(stock=stock, synced_at=timezone.now())
    return stock


@job
def reorder_if_low(sku: str, threshold: int = 50) -> bool:
    """Enqueued after ``sync_inventory`` (``chain``, ``after=``): reads the stock it returned
    from ``current_job().parent_results`` and says whether to reorder."""
    stock = sum(current_job().parent_results.values())
    return stock < threshold


# ----- a job that always fails: it ends dead, and the admin can retry it --------------------------


class WebhookFailed(Exception):
    """The partner's endpoint could not be reached."""


@job(queue="webhooks", max_attempts=3)
def deliver_webhook(endpoint_id: int, event: str, payload: dict[str, Any]) -> int:
    """POST ``payload`` to a partner. No network is used: hosts under ``.invalid`` fail, as they
    would for real. Fix the URL in the admin, then retry the dead jobs: they succeed."""
    endpoint = WebhookEndpoint.objects.get(pk=endpoint_id)
    host = urlsplit(endpoint.url).hostname or ""
    if host == "invalid" or host.endswith(".invalid"):
        raise WebhookFailed(f"POST {endpoint.url} ({event}): could not resolve host {host!r}")
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(deliveries=F("deliveries") + 1)
    logger.info("Delivered %s to %s", event, endpoint.url)
    return 200


# ----- an async def job: thousands of them wait at once in one worker process --------------------


@job(queue="webhooks", max_attempts=3)
async def notify_partner(endpoint_id: int, event: str, payload: dict[str, Any]) -> int:
    """``deliver_webhook`` as an ``async def`` job (docs/async.md): while it waits for the
    partner's answer it holds no thread, so one worker process runs thousands at once. The
    database through the async ORM; no network in the demo (``.invalid`` hosts fail)."""
    endpoint = await WebhookEndpoint.objects.aget(pk=endpoint_id)
    host = urlsplit(endpoint.url).hostname or ""
    if host == "invalid" or host.endswith(".invalid"):
        raise WebhookFailed(f"POST {endpoint.url} ({event}): could not resolve host {host!r}")
    await asyncio.sleep(0.05)  # the HTTP round trip: with httpx, `await client.post(...)`
    await WebhookEndpoint.objects.filter(pk=endpoint.pk).aupdate(deliveries=F("deliveries") + 1)
    logger.info("Notified %s of %s", endpoint.url, event)
    return 200


# ----- per-tenant work: one rebuild per store at a time (concurrency_key) -------------------------


class OverlappingRebuild(Exception):
    """Two rebuilds of one store's report ran at once (the concurrency key prevents it)."""


@job(queue="reports", priority=-5)
def rebuild_store_report(store_id: int) -> dict[str, Any]:
    """Recompute a store's totals. Slow, and two at once for one store would be wasted work,
    so it is enqueued with ``concurrency_key=f"store-report:{store_id}"`` (see below): rebuilds
    of different stores run in parallel, rebuilds of one store one after the other."""
    report, _ = StoreReport.objects.get_or_create(store_id=store_id)
    StoreReport.objects.filter(pk=report.pk).update(rebuilding=F("rebuilding") + 1)
    try:
        report.refresh_from_db()
        if report.rebuilding > 1:
            raise OverlappingRebuild(f"store {store_id}: {report.rebuilding} rebuilds at once")
        orders = Order.objects.filter(store_id=store_id)
        totals = orders.aggregate(n=Count("id"), revenue=Sum("total"))
        time.sleep(0.2)  # stands for a slow query
        StoreReport.objects.filter(pk=report.pk).update(
            orders=totals["n"],
            revenue=totals["revenue"] or 0,
            rebuilds=F("rebuilds") + 1,
        )
    finally:
        StoreReport.objects.filter(pk=report.pk).update(rebuilding=F("rebuilding") - 1)
    return {"orders": totals["n"], "revenue": str(totals["revenue"] or 0)}


def enqueue_report_rebuild(store: Store) -> Job:
    """The per-tenant concurrency key is chosen at enqueue time with ``using()``."""
    return rebuild_store_report.using(concurrency_key=f"store-report:{store.pk}").enqueue(store.pk)


# ----- a unique job: however often it is asked for, one waits in the queue ------------------------


@job(unique_key="search-index")
def rebuild_search_index() -> int:
    """Enqueued after every catalogue change; while one rebuild is pending or running, enqueueing
    again returns that job (``job.deduplicated`` is True) instead of adding another."""
    documents = Order.objects.count()
    index, _ = SearchIndex.objects.get_or_create(pk=1)
    SearchIndex.objects.filter(pk=index.pk).update(
        documents=documents, rebuilt_at=timezone.now(), rebuilds=F("rebuilds") + 1
    )
    return documents
