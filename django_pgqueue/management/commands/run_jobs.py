"""``manage.py run_jobs``: parse options, start a worker (or a supervisor of several)."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_pgqueue.conf import settings
from django_pgqueue.management.options import of
from django_pgqueue.pools import close_pools
from django_pgqueue.rules import WORKER_OPTIONS
from django_pgqueue.worker import Supervisor
from django_pgqueue.worker.reloader import run_with_reloader


class Command(BaseCommand):
    help = (
        "Run background jobs from the PostgreSQL queue until stopped (SIGTERM/SIGINT finish "
        "running jobs first; a second signal exits at once)."
    )
    requires_system_checks = ["django_pgqueue"]

    def check(self, *args: Any, **kwargs: Any) -> None:
        """The queue's checks, those that read its database included (like ``migrate``'s):
        a broken schedule is reported when the worker starts."""
        kwargs.setdefault("databases", [settings.DATABASE])
        super().check(*args, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            dest="queues",
            metavar="QUEUE",
            type=of(WORKER_OPTIONS["queue"]),
            help="Serve this queue; repeat for several, served in the order given "
            "(default: every queue, by priority).",
        )
        parser.add_argument(
            "--processes",
            type=of(WORKER_OPTIONS["processes"]),
            default=1,
            help="Worker processes under the supervisor that restarts any that die (default: 1).",
        )
        parser.add_argument(
            "--threads",
            type=of(WORKER_OPTIONS["threads"]),
            default=1,
            help="Jobs run at once in each process, for I/O-bound jobs (default: 1).",
        )
        parser.add_argument(
            "--async-concurrency",
            type=of(WORKER_OPTIONS["async_concurrency"]),
            default=None,
            help="async def jobs run at once in each process, on its event loop beside the "
            f"threads (default: PGQUEUE_ASYNC_CONCURRENCY = {settings.ASYNC_CONCURRENCY}).",
        )
        parser.add_argument(
            "--batch-size",
            type=of(WORKER_OPTIONS["batch_size"]),
            default=None,
            help="Most jobs a process claims ahead in one statement "
            f"(default: PGQUEUE_BATCH_SIZE = {settings.BATCH_SIZE}).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit with status 0 once no runnable job is left (for tests, cron and CI).",
        )
        parser.add_argument(
            "--max-jobs",
            type=of(WORKER_OPTIONS["max_jobs"]),
            default=None,
            help="Exit after running this many jobs (with --processes, the process is replaced).",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=of(WORKER_OPTIONS["shutdown_timeout"]),
            default=None,
            help="Seconds a graceful shutdown waits for running jobs "
            f"(default: PGQUEUE_SHUTDOWN_TIMEOUT = {settings.SHUTDOWN_TIMEOUT:g}).",
        )
        parser.add_argument(
            "--cancel-timeout",
            type=of(WORKER_OPTIONS["cancel_timeout"]),
            default=None,
            help="Seconds a cancelled running job has to return before its thread is abandoned "
            f"(default: PGQUEUE_CANCEL_TIMEOUT = {settings.CANCEL_TIMEOUT}).",
        )
        parser.add_argument(
            "--no-schedules",
            action="store_true",
            help="Don't enqueue periodic schedules' jobs in this run_jobs (other workers do; "
            "default: PGQUEUE_FIRE_SCHEDULES). Burst runs never fire them.",
        )
        parser.add_argument(
            "--worker-id",
            type=of(WORKER_OPTIONS["worker_id"]),
            default=None,
            help="Name of this worker in the jobs' locked_by column and the admin "
            "(default: HOSTNAME:PID; with --processes, ID.N per process).",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="For development: restart when the code changes, like runserver (running "
            "jobs finish or are handed back first, as on SIGTERM). Not with --burst.",
        )
        parser.add_argument(
            "--probe-port",
            type=of(WORKER_OPTIONS["probe_port"]),
            default=None,
            help="Serve /metrics (Prometheus; the metrics extra), /healthz and /readyz on this "
            "port for all the processes (default: PGQUEUE_PROBE_PORT, unset: none).",
        )
        parser.add_argument(
            "--probe-host",
            type=of(WORKER_OPTIONS["probe_host"]),
            default=None,
            help=f"The address the probe port listens on (default: PGQUEUE_PROBE_HOST = "
            f"{settings.PROBE_HOST}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["reload"] and options["burst"]:
            raise CommandError(
                "--reload restarts a worker that runs until stopped; a --burst run exits once "
                "the queue is empty. Use one or the other."
            )
        configure_logging(options["verbosity"])
        worker_options: dict[str, Any] = {
            "queues": options["queues"],
            "threads": options["threads"],
            "async_concurrency": options["async_concurrency"],
            "batch_size": options["batch_size"],
            "burst": options["burst"],
            "max_jobs": options["max_jobs"],
            "shutdown_timeout": options["shutdown_timeout"],
            "cancel_timeout": options["cancel_timeout"],
            "worker_id": options["worker_id"],
            "probe_port": options["probe_port"],
            "probe_host": options["probe_host"],
        }
        if options["no_schedules"]:
            worker_options["schedules"] = False

        # Always supervised, even with one process: a job that kills its process (os._exit, a
        # segfault, the OOM killer) never takes run_jobs down (docs/worker.md).
        def supervise() -> int:
            return Supervisor(options["processes"], **worker_options).run()

        if options["reload"]:
            close_pools()  # the checks' connection (and pool): this process only restarts
            code = run_with_reloader(supervise)
        else:
            code = supervise()
        if code:
            sys.exit(code)


def configure_logging(verbosity: int) -> None:
    """Per-job lines at INFO (-v 1, the default), debug at -v 2+, warnings and errors at -v 0.

    A project that configures the ``django_pgqueue`` logger in LOGGING keeps its handlers.
    """
    logger = logging.getLogger("django_pgqueue")  # noqa: TID251 (configures, logs nothing)
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logger.setLevel(level)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
