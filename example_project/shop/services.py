"""Business logic the views and the demo share."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.db import transaction

from shop.jobs import deliver_webhook, send_order_confirmation, send_review_request
from shop.models import Order, Store

REVIEW_REQUEST_DELAY = timedelta(days=3)


def place_order(store: Store, customer_email: str, total: Decimal) -> Order:
    """Create an order and enqueue its follow-ups, all in one transaction.

    ``enqueue`` INSERTs the job with the caller's connection: if anything below raises, the
    order and its jobs roll back together, and a worker never sees a job for an order that
    does not exist. Once the transaction commits, the confirmation cannot be lost, even if
    this process dies the next instant.
    """
    with transaction.atomic():
        order = Order.objects.create(store=store, customer_email=customer_email, total=total)
        send_order_confirmation.enqueue(order.pk)
        send_review_request.using(run_after=REVIEW_REQUEST_DELAY).enqueue(order.pk)
        for endpoint in store.webhooks.all():
            deliver_webhook.enqueue(
                endpoint.pk, "order.created", {"order": order.pk, "total": str(order.total)}
            )
    return order
