"""A tiny multi-tenant shop: stores (the tenants), their orders, and what the jobs touch."""

from __future__ import annotations

from decimal import Decimal

from django.db import models


class Store(models.Model):
    """A tenant. Its reports are rebuilt one at a time (``concurrency_key``)."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(unique=True)

    def __str__(self) -> str:
        return self.name


class Order(models.Model):
    store = models.ForeignKey(Store, on_delete=models.CASCADE, related_name="orders")
    customer_email = models.EmailField()
    total = models.DecimalField(max_digits=10, decimal_places=2, default=Decimal("0"))
    created_at = models.DateTimeField(auto_now_add=True)
    #: Set by the ``send_order_confirmation`` job.
    confirmation_sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"Order #{self.pk} ({self.store})"


class StoreReport(models.Model):
    """Rebuilt by ``rebuild_store_report``; never two rebuilds of one store at once."""

    store = models.OneToOneField(Store, on_delete=models.CASCADE, related_name="report")
    orders = models.PositiveIntegerField(default=0)
    revenue = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0"))
    rebuilds = models.PositiveIntegerField(default=0)
    #: A rebuild in progress counts here; the job checks it never exceeds 1.
    rebuilding = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"Report of {self.store}"


class SupplierSync(models.Model):
    """Calls to the (simulated) supplier API, which times out a few times per SKU."""

    sku = models.CharField(max_length=50, unique=True)
    calls = models.PositiveIntegerField(default=0)
    stock = models.IntegerField(null=True, blank=True)
    synced_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.sku


class WebhookEndpoint(models.Model):
    """A partner's webhook. Deliveries to a ``.invalid`` host fail: fix the URL in the admin,
    then retry the dead deliveries from the job admin."""

    store = models.ForeignKey(Store, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField()
    deliveries = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return self.url


class SearchIndex(models.Model):
    """A single row: when the (simulated) search index was last rebuilt."""

    documents = models.PositiveIntegerField(default=0)
    rebuilt_at = models.DateTimeField(null=True, blank=True)
    rebuilds = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"Search index ({self.documents} documents)"
