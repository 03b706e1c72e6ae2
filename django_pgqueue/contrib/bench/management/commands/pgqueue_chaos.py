"""``manage.py pgqueue_chaos``: a steady load through worker kills, terminated connections and
a server restart; reports jobs lost (must be 0), duplicates and recovery times."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_pgqueue.contrib.bench import chaos
from django_pgqueue.contrib.bench.options import BENCH_OPTIONS
from django_pgqueue.contrib.bench.results import BenchError
from django_pgqueue.management.options import of
from django_pgqueue.printable import printable
from django_pgqueue.rules import WORKER_OPTIONS


def fault_list(text: str) -> tuple[str, ...]:
    """``--faults``: comma-separated names of :data:`chaos.FAULTS`, at least one."""
    faults = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = sorted(set(faults) - set(chaos.FAULTS))
    choices = f"choose from {', '.join(chaos.FAULTS)}"
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown faults {', '.join(unknown)} ({choices})")
    if not faults:
        raise argparse.ArgumentTypeError(f"no fault given ({choices})")
    return faults


class Command(BaseCommand):
    help = (
        "Run a steady load on the queue database (a scratch queue, deleted afterwards) through "
        "a SIGKILL of a worker process, pg_terminate_backend of the workers' connections and, "
        "with --allow-restart --pgdata DIR, a restart of the local server; report jobs lost, "
        "duplicates and the recovery time after each fault. Exits 1 if a job was lost."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        d = chaos.ChaosOptions()
        parser.add_argument(
            "--rate",
            type=of(BENCH_OPTIONS["rate"]),
            default=d.rate,
            help=f"Jobs per second (default: {d.rate:g}).",
        )
        parser.add_argument(
            "--job-ms",
            type=of(BENCH_OPTIONS["job_ms"]),
            default=d.job_ms,
            help=f"Each job sleeps this long (default: {d.job_ms:g} ms).",
        )
        parser.add_argument(
            "--processes",
            type=of(WORKER_OPTIONS["processes"]),
            default=d.processes,
            help=f"Worker processes (default: {d.processes}).",
        )
        parser.add_argument(
            "--threads",
            type=of(WORKER_OPTIONS["threads"]),
            default=d.threads,
            help=f"Threads per process (default: {d.threads}).",
        )
        parser.add_argument(
            "--faults",
            type=fault_list,
            default=None,
            help=f"Comma-separated, in order (default: {','.join(chaos.FAULTS)}, without "
            "restart unless --allow-restart is given).",
        )
        parser.add_argument(
            "--fault-interval",
            type=of(BENCH_OPTIONS["fault_interval"]),
            default=d.fault_interval,
            help=f"Seconds between faults (default: {d.fault_interval:g}).",
        )
        parser.add_argument(
            "--rounds",
            type=of(BENCH_OPTIONS["rounds"]),
            default=d.rounds,
            help="Times through the fault list (default: 1).",
        )
        parser.add_argument(
            "--drain-timeout",
            type=of(BENCH_OPTIONS["drain_timeout"]),
            default=d.drain_timeout,
            help=f"Wait this long for the backlog at the end (default: {d.drain_timeout:g} s).",
        )
        parser.add_argument(
            "--allow-restart",
            action="store_true",
            help="Allow restarting the server (it must be local and run from --pgdata).",
        )
        parser.add_argument(
            "--pgdata",
            type=Path,
            default=None,
            help="The server's data directory (checked against SHOW data_directory).",
        )
        parser.add_argument(
            "--pg-ctl",
            default="pg_ctl",
            help="The pg_ctl to restart it with (default: pg_ctl on PATH).",
        )
        parser.add_argument(
            "--pg-log", type=Path, default=None, help="pg_ctl -l: where the restarted server logs."
        )
        parser.add_argument("--json", action="store_true", help="End with one line of JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        server = None
        if options["allow_restart"]:
            if options["pgdata"] is None:
                raise CommandError(
                    "--allow-restart needs --pgdata DIR (the server's data directory)"
                )
            server = chaos.ServerControl(options["pgdata"], options["pg_ctl"], options["pg_log"])
        faults = options["faults"] or tuple(
            f for f in chaos.FAULTS if f != "restart" or server is not None
        )
        if "restart" in faults and server is None:
            raise CommandError("the restart fault needs --allow-restart and --pgdata")
        try:
            result = chaos.ChaosRun(
                chaos.ChaosOptions(
                    rate=options["rate"],
                    job_ms=options["job_ms"],
                    processes=options["processes"],
                    threads=options["threads"],
                    faults=faults,
                    fault_interval=options["fault_interval"],
                    rounds=options["rounds"],
                    drain_timeout=options["drain_timeout"],
                ),
                server,
            ).run()
        except BenchError as exc:
            raise CommandError(str(exc)) from None
        for line in chaos.lines(result):
            self.stdout.write(printable(line))
        if options["json"]:
            self.stdout.write(json.dumps(result.as_json(), default=str))
        if result.lost:
            sys.exit(1)
