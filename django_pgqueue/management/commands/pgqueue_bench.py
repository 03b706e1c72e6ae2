"""``manage.py pgqueue_bench``: measure this queue on this database (see docs/performance.md)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_pgqueue import bench


class BarProgress:
    """A one-line progress bar on a terminal; one line per phase anywhere else."""

    width = 24

    def __init__(self, stream: TextIO, enabled: bool = True) -> None:
        self.stream = stream
        self.enabled = enabled
        self.live = enabled and stream.isatty()
        self.phase = ""
        self.total: int | None = None
        self.started = 0.0

    def start(self, phase: str, total: int | None = None) -> None:
        self.phase, self.total, self.started = phase, total, time.monotonic()
        if self.live:
            self._draw(0)
        elif self.enabled:
            self.stream.write(f"{phase} ...\n")
            self.stream.flush()

    def update(self, done: int) -> None:
        if self.live:
            self._draw(done)

    def finish(self, summary: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        line = f"{self.phase:<40} {summary} ({elapsed:.1f} s)"
        self.stream.write(f"\r\033[K{line}\n" if self.live else f"  {line}\n")
        self.stream.flush()

    def _draw(self, done: int) -> None:
        elapsed = time.monotonic() - self.started
        if self.total:
            filled = min(self.width, int(self.width * done / self.total))
            bar = "#" * filled + "-" * (self.width - filled)
            status = f"[{bar}] {done:,}/{self.total:,}"
        else:
            status = "[" + "." * (int(elapsed * 4) % (self.width + 1)) + "]"
        self.stream.write(f"\r\033[K{self.phase:<40} {status} {elapsed:.1f} s")
        self.stream.flush()


class Command(BaseCommand):
    help = (
        "Benchmark the job queue on this database in a scratch queue (deleted afterwards): bulk "
        "and single enqueue, drain by real worker processes, pickup latency, and claim speed "
        "with a large history. --memory instead measures one worker's RSS over many jobs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        defaults = bench.BenchOptions()
        parser.add_argument(
            "--jobs",
            type=int,
            default=defaults.jobs,
            help=f"No-op jobs bulk-enqueued, then drained (default: {defaults.jobs:,}).",
        )
        parser.add_argument(
            "--processes",
            type=int,
            default=defaults.processes,
            help=f"Worker processes for the drain (default: {defaults.processes}).",
        )
        parser.add_argument(
            "--threads",
            type=int,
            default=defaults.threads,
            help=f"Threads per worker process (default: {defaults.threads}).",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=None,
            help="Jobs claimed per statement (default: PGQUEUE_BATCH_SIZE).",
        )
        parser.add_argument(
            "--single-samples",
            type=int,
            default=defaults.single_samples,
            help=f"enqueue() calls timed (default: {defaults.single_samples:,}).",
        )
        parser.add_argument(
            "--pickup-samples",
            type=int,
            default=defaults.pickup_samples,
            help=f"Jobs timed from commit to start (default: {defaults.pickup_samples}).",
        )
        parser.add_argument(
            "--history-rows",
            type=int,
            default=defaults.history_rows,
            help=f"Finished rows added for history_claim_ratio (default: "
            f"{defaults.history_rows:,}).",
        )
        parser.add_argument(
            "--claim-jobs",
            type=int,
            default=defaults.claim_jobs,
            help=f"Jobs per claim-throughput run (default: {defaults.claim_jobs:,}).",
        )
        parser.add_argument(
            "--claim-repeats",
            type=int,
            default=defaults.claim_repeats,
            help=f"Claim-throughput runs per history size, median kept "
            f"(default: {defaults.claim_repeats}).",
        )
        parser.add_argument(
            "--phases",
            default=",".join(bench.PHASES),
            help=f"Comma-separated phases to run (default: all of {','.join(bench.PHASES)}); "
            "the figures of the others are null.",
        )
        parser.add_argument(
            "--memory",
            action="store_true",
            help="Only measure one worker's resident memory after 10,000 jobs and after "
            "--memory-jobs jobs (takes minutes).",
        )
        parser.add_argument(
            "--memory-jobs",
            type=int,
            default=1_000_000,
            help="Jobs run for --memory (default: 1,000,000).",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="End the output with one line holding the results as a JSON object.",
        )
        parser.add_argument(
            "--no-progress", action="store_true", help="No progress output on stderr."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        for name in (
            "jobs",
            "processes",
            "threads",
            "single_samples",
            "pickup_samples",
            "history_rows",
            "claim_jobs",
            "claim_repeats",
            "memory_jobs",
        ):
            if options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        if options["batch_size"] is not None and options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        phases = [p.strip() for p in options["phases"].split(",") if p.strip()]
        unknown = sorted(set(phases) - set(bench.PHASES))
        if unknown:
            raise CommandError(f"Unknown phases: {', '.join(unknown)}")
        # The raw stream under Django's OutputWrapper, which would end every write with "\n".
        stream: TextIO = getattr(self.stderr, "_out", sys.stderr)
        progress = BarProgress(stream, enabled=not options["no_progress"])

        if options["memory"]:
            memory = bench.run_memory(
                jobs=options["memory_jobs"],
                threads=options["threads"],
                batch_size=options["batch_size"],
                progress=progress,
            )
            self.stdout.write(
                f"Worker RSS after {memory.first_jobs:,} jobs: {memory.rss_kib_first:,} KiB\n"
                f"Worker RSS after {memory.jobs:,} jobs: {memory.rss_kib_end:,} KiB "
                f"(peak {memory.hwm_kib_end:,} KiB, {memory.seconds:.0f} s)"
            )
            for done, rss in memory.samples:
                self.stdout.write(f"  {done:>10,} jobs: {rss:,} KiB")
            if options["json"]:
                self.stdout.write(json.dumps(memory.__dict__, default=str))
            return

        result = bench.Bench(
            bench.BenchOptions(
                jobs=options["jobs"],
                processes=options["processes"],
                threads=options["threads"],
                batch_size=options["batch_size"],
                single_samples=options["single_samples"],
                pickup_samples=options["pickup_samples"],
                history_rows=options["history_rows"],
                claim_jobs=options["claim_jobs"],
                claim_repeats=options["claim_repeats"],
                phases=phases,
            ),
            progress=progress,
        ).run()
        self.write_table(result)
        if options["json"]:
            self.stdout.write(json.dumps(result.as_json(), default=str))

    def write_table(self, result: bench.BenchResult) -> None:
        rows = [("figure", "measured", "target"), *bench.describe(result)]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        self.stdout.write("")
        for index, (name, value, target) in enumerate(rows):
            self.stdout.write(f"{name:<{widths[0]}}  {value:>{widths[1]}}  {target}")
            if index == 0:
                self.stdout.write("  ".join("-" * w for w in widths))
        self.stdout.write("")
        for name, value in result.details.items():
            self.stdout.write(f"{name}: {value}")
        machine = result.machine
        self.stdout.write(
            f"machine: {machine.get('cpu_count')} CPUs ({machine.get('cpu_model')}), "
            f"load {machine.get('load_average_1m')}, PostgreSQL {machine.get('postgresql')} "
            f"(synchronous_commit={machine.get('postgresql_synchronous_commit')}, "
            f"autovacuum={machine.get('postgresql_autovacuum')}), "
            f"Python {machine.get('python')}, Django {machine.get('django')}, "
            f"psycopg {machine.get('psycopg')} ({machine.get('psycopg_impl')})"
        )
        self.stdout.write("settings: " + ", ".join(f"{k}={v}" for k, v in result.settings.items()))
