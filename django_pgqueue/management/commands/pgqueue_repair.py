"""``manage.py pgqueue_repair [--dry-run]``: derive the queue's side tables from the job table
again (docs/storage.md).

Thin: :func:`django_pgqueue.operations.violations` and :func:`~django_pgqueue.operations.repair`.
Safe while workers run; idempotent.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_pgqueue import operations
from django_pgqueue.checks import describe
from django_pgqueue.conf import settings


class Command(BaseCommand):
    help = (
        "Rebuild what the queue derives from the job table (ready rows): run it after a "
        "restore with triggers disabled or a logical-replication cutover. Safe while workers run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="show what is wrong and would be repaired; change nothing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        db = operations.DjangoDatabase(settings.DATABASE)
        if not operations.storage_ready(db):
            raise CommandError("The job table is not migrated yet: run `manage.py migrate`.")
        found = operations.violations(db)
        for violation in found:
            self.stdout.write("{}: {}".format(*describe(violation)))
        if options["dry_run"]:
            self.stdout.write(
                "Nothing to repair."
                if not found
                else "Dry run: nothing changed; run without --dry-run to repair."
            )
            return
        repaired = operations.repair(db)
        operations.repair_workflows(db)
        self.stdout.write(
            f"Repaired: {len(repaired.rederived)} jobs given their ready row again, "
            f"{len(repaired.orphans_dropped)} jobs' stray rows deleted; workflows counted again."
        )
