"""``manage.py pgqueue_bench``: measure this queue on this database (see docs/performance.md)."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_pgqueue import bench
from django_pgqueue.bench.progress import BarProgress


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
            for line in bench.memory_lines(memory):
                self.stdout.write(line)
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
        for line in bench.table_lines(result):
            self.stdout.write(line)
        if options["json"]:
            self.stdout.write(json.dumps(result.as_json(), default=str))
