"""``manage.py pgqueue_queue pause|resume|limit|list``: runtime control of queues, for every
worker.

Thin: each subcommand calls the library (``pause_queue``, ``resume_queue``...).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_pgqueue import limit_queue, operations, pause_queue, resume_queue
from django_pgqueue.conf import settings
from django_pgqueue.management.options import of
from django_pgqueue.printable import printable
from django_pgqueue.rules import JOB_OPTIONS, WORKER_OPTIONS
from django_pgqueue.states import QueueState


class Command(BaseCommand):
    help = "Pause, resume or list queues at runtime (every worker follows within a second)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        for action, text in (
            ("pause", "no worker starts a job of the queue; running jobs finish"),
            ("resume", "workers start its jobs again"),
        ):
            command = sub.add_parser(action, help=text)
            command.add_argument("name", metavar="NAME", type=of(WORKER_OPTIONS["queue"]))
        limit = sub.add_parser(
            "limit", help="set the queue's limits (an option left out removes that limit)"
        )
        limit.add_argument("name", metavar="NAME", type=of(WORKER_OPTIONS["queue"]))
        limit.add_argument(
            "--concurrency",
            type=of(JOB_OPTIONS["concurrency_limit"]),
            default=None,
            help="most of its jobs running at once, across every worker",
        )
        limit.add_argument(
            "--rate",
            type=of(JOB_OPTIONS["rate_limit"]),
            default=None,
            help="most job starts per period: 10/s, 100/m, 5/2s, 1000/h, 20000/d",
        )
        sub.add_parser("list", help="the queues that have settings (the others run, unlimited)")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "pause":
            pause_queue(options["name"])
            self.stdout.write(f"Queue {printable(options['name'])} paused.")
        elif action == "resume":
            resume_queue(options["name"])
            self.stdout.write(f"Queue {printable(options['name'])} resumed.")
        elif action == "limit":
            limit_queue(
                options["name"],
                concurrency_limit=options["concurrency"],
                rate_limit=options["rate"],
            )
            self.stdout.write(
                f"Queue {printable(options['name'])}: concurrency limit "
                f"{options['concurrency'] or 'none'}, rate limit {options['rate'] or 'none'}."
            )
        else:
            controls = operations.queue_controls(operations.DjangoDatabase(settings.DATABASE))
            if not controls:
                self.stdout.write("No queue has settings: every queue runs, unlimited.")
            for c in controls:
                self.stdout.write(
                    f"{printable(c.name)}: {'PAUSED' if c.paused else QueueState.RUNNING}"
                    f", concurrency limit {c.concurrency_limit or '-'}"
                    f", rate limit {c.rate_limit or '-'}"
                )
