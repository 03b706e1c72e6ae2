"""``manage.py seed_demo``: stores, orders and a realistic mix of jobs to look at."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from shop.jobs import (
    enqueue_report_rebuild,
    rebuild_search_index,
    send_newsletter,
    sync_inventory,
)
from shop.models import Store, SupplierSync, WebhookEndpoint
from shop.services import place_order

STORES = [
    ("Acme Outdoor", "acme-outdoor", 20, None),
    ("Bookworm", "bookworm", 15, "https://hooks.bookworm.example/orders"),
    # A partner whose webhook host does not resolve: its deliveries end up dead.
    ("Coffee Corner", "coffee-corner", 5, "https://hooks.coffee-corner.invalid/orders"),
]
SKUS = ["TENT-2P", "STOVE-X1", "MUG-350", "LAMP-USB"]


class Command(BaseCommand):
    help = "Create demo stores and orders, and enqueue a realistic mix of jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--newsletter", type=int, default=400, help="newsletter emails")
        parser.add_argument("--seed", type=int, default=7, help="random seed")

    def handle(self, *args: Any, **options: Any) -> None:
        rng = random.Random(options["seed"])
        counts: dict[str, int] = {}

        stores = []
        for name, slug, _, webhook in STORES:
            store, _ = Store.objects.get_or_create(slug=slug, defaults={"name": name})
            stores.append(store)
            if webhook:
                # Break Coffee Corner's endpoint again, in case it was fixed in the admin.
                WebhookEndpoint.objects.update_or_create(store=store, defaults={"url": webhook})

        # 1. Orders: each enqueues a confirmation (now), a review request (in three days)
        #    and a webhook per endpoint, in the order's own transaction.
        for store, (_, _, n_orders, _) in zip(stores, STORES, strict=True):
            for _ in range(n_orders):
                email = f"customer{rng.randrange(1000, 9999)}@example.com"
                total = Decimal(rng.randrange(500, 25000)) / 100
                place_order(store, email, total)
        counts["orders placed"] = sum(s[2] for s in STORES)

        # 2. A bulk enqueue: one INSERT for the whole newsletter.
        issue = "Autumn best sellers"
        readers = [f"reader{i}@example.com" for i in range(options["newsletter"])]
        ids = send_newsletter.enqueue_many([{"email": r, "issue": issue} for r in readers])
        counts["newsletter emails (enqueue_many)"] = len(ids)

        # 3. Flaky jobs: the supplier API times out twice per SKU, then answers.
        SupplierSync.objects.filter(sku__in=SKUS).update(calls=0)
        with transaction.atomic():
            for sku in SKUS:
                sync_inventory.enqueue(sku, fail_times=2)
        counts["inventory syncs (fail twice, then succeed)"] = len(SKUS)

        # 4. Per-tenant jobs: four report rebuilds per store, one at a time per store.
        for store in stores:
            for _ in range(4):
                enqueue_report_rebuild(store)
        counts["report rebuilds (concurrency_key per store)"] = 4 * len(stores)

        # 5. A unique job asked for five times: one job.
        jobs = [rebuild_search_index.enqueue() for _ in range(5)]
        deduplicated = sum(1 for j in jobs if j.deduplicated)  # type: ignore[attr-defined]
        counts[f"search index rebuilds (asked 5 times, {deduplicated} deduplicated)"] = 5

        width = max(len(k) for k in counts)
        for key, value in counts.items():
            self.stdout.write(f"  {key:<{width}}  {value:>4}")
