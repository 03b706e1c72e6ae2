from __future__ import annotations

from django.contrib import admin

from shop.models import Order, SearchIndex, Store, StoreReport, SupplierSync, WebhookEndpoint


@admin.register(Store)
class StoreAdmin(admin.ModelAdmin):
    list_display = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "store", "customer_email", "total", "created_at", "confirmation_sent_at"]
    list_filter = ["store"]


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ["id", "store", "url", "deliveries"]
    list_editable = ["url"]


@admin.register(StoreReport)
class StoreReportAdmin(admin.ModelAdmin):
    list_display = ["store", "orders", "revenue", "rebuilds", "updated_at"]


@admin.register(SupplierSync)
class SupplierSyncAdmin(admin.ModelAdmin):
    list_display = ["sku", "calls", "stock", "synced_at"]


@admin.register(SearchIndex)
class SearchIndexAdmin(admin.ModelAdmin):
    list_display = ["id", "documents", "rebuilds", "rebuilt_at"]
