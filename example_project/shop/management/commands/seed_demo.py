"""``manage.py seed_demo``: stores, orders and a realistic mix of jobs to look at.

Each run adds to what is there; ``--fresh`` (what ``make demo`` passes) first deletes the jobs
and orders of earlier runs (:func:`reset_demo`), so the admin shows one demo's batch.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from django_pgqueue import batch
from django_pgqueue.models import Batch, Job
from django_pgqueue.testing import capture_jobs
from shop.jobs import (
    deliver_webhook,
    enqueue_report_rebuild,
    rebuild_search_index,
    report_newsletter,
    send_newsletter,
    send_order_confirmation,
    send_review_request,
    sync_inventory,
)
from shop.models import Order, Store, SupplierSync, WebhookEndpoint
from shop.services import place_order

STORES = [
    ("Acme Outdoor", "acme-outdoor", 20, None),
    ("Bookworm", "bookworm", 15, "https://hooks.bookworm.example/orders"),
    # A partner whose webhook host does not resolve: its deliveries end up dead.
    ("Coffee Corner", "coffee-corner", 5, "https://hooks.coffee-corner.invalid/orders"),
]
SKUS = ["TENT-2P", "STOVE-X1", "MUG-350", "LAMP-USB"]


def reset_demo() -> tuple[int, int]:
    """Delete every job and order of the demo database; returns how many of each.

    The demo's database is its own (``pgqueue_demo``): all its jobs are earlier demos' (and
    the example declares no periodic schedule, so there is none to remove). Stores, endpoints
    and supplier rows are kept and set right by the seeding itself.
    """
    with transaction.atomic():
        # The batches first: their members deleted unfinished would end them, and enqueue
        # their callbacks.
        Batch.objects.all().delete()
        jobs = Job.objects.all().delete()[1].get(Job._meta.label, 0)
        orders = Order.objects.all().delete()[1].get(Order._meta.label, 0)
    return jobs, orders


class Command(BaseCommand):
    help = "Create demo stores and orders, and enqueue a realistic mix of jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--newsletter", type=int, default=400, help="newsletter emails")
        parser.add_argument("--seed", type=int, default=7, help="random seed")
        parser.add_argument(
            "--fresh",
            action="store_true",
            help="first delete the jobs and orders of earlier runs (make demo does)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        rng = random.Random(options["seed"])
        if options["fresh"]:
            jobs, orders = reset_demo()
            self.stderr.write(f"  deleted the {jobs} jobs and {orders} orders of earlier runs")
        counts: dict[str, int] = {}  # every row counts jobs (capture_jobs sees each enqueue)

        stores = []
        for name, slug, _, webhook in STORES:
            store, _ = Store.objects.get_or_create(slug=slug, defaults={"name": name})
            stores.append(store)
            if webhook:
                # Break Coffee Corner's endpoint again, in case it was fixed in the admin.
                WebhookEndpoint.objects.update_or_create(store=store, defaults={"url": webhook})

        # 1. Orders: each enqueues a confirmation (now), a review request (in three days)
        #    and a webhook per endpoint, in the order's own transaction.
        orders = sum(s[2] for s in STORES)
        with capture_jobs() as jobs:
            for store, (_, _, n_orders, _) in zip(stores, STORES, strict=True):
                for _ in range(n_orders):
                    email = f"customer{rng.randrange(1000, 9999)}@example.com"
                    total = Decimal(rng.randrange(500, 25000)) / 100
                    place_order(store, email, total)
        counts[f"order confirmations ({orders} orders)"] = len(jobs.filter(send_order_confirmation))
        counts["review requests (run_after: in 3 days)"] = len(jobs.filter(send_review_request))
        counts["webhook deliveries (Coffee Corner's fail)"] = len(jobs.filter(deliver_webhook))

        # 2. A bulk enqueue in a batch: one COPY for the whole newsletter, and once every email
        #    has been sent (or given up on), one report of how many were sent.
        issue = "Autumn best sellers"
        readers = [f"reader{i}@example.com" for i in range(options["newsletter"])]
        with batch(on_complete=report_newsletter.s(issue), description=f"newsletter: {issue}"):
            ids = send_newsletter.enqueue_many([{"email": r, "issue": issue} for r in readers])
        counts["newsletter emails (enqueue_many, in a batch)"] = len(ids)

        # 3. Flaky jobs: the supplier API times out twice per SKU, then answers.
        SupplierSync.objects.filter(sku__in=SKUS).update(calls=0)
        with capture_jobs() as jobs, transaction.atomic():
            for sku in SKUS:
                sync_inventory.enqueue(sku, fail_times=2)
        counts["inventory syncs (fail twice, then succeed)"] = len(jobs)

        # 4. Per-tenant jobs: four report rebuilds per store, one at a time per store.
        with capture_jobs() as jobs:
            for store in stores:
                for _ in range(4):
                    enqueue_report_rebuild(store)
        counts["report rebuilds (concurrency_key per store)"] = len(jobs)

        # 5. A unique job asked for five times: one job (or none, if one is already waiting).
        with capture_jobs() as jobs:
            for _ in range(5):
                rebuild_search_index.enqueue()
        added = [j for j in jobs if not j.deduplicated]
        counts[f"search index rebuild (unique: asked 5 times, {5 - len(added)} deduplicated)"] = (
            len(added)
        )

        width = max(len(k) for k in counts)
        for key, value in counts.items():
            self.stdout.write(f"  {key:<{width}}  {value:>4}")
        self.stdout.write(f"  {'jobs enqueued':<{width}}  {sum(counts.values()):>4}")
