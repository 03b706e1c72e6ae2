"""``manage.py pgqueue_bench``: measure this queue on this database (see docs/performance.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_pgqueue.contrib.bench import fleet
from django_pgqueue.contrib.bench.compare import CompareOptions, run_compare
from django_pgqueue.contrib.bench.memory import run_memory
from django_pgqueue.contrib.bench.options import BENCH_OPTIONS
from django_pgqueue.contrib.bench.phases import DEFAULT_PHASES, PHASES
from django_pgqueue.contrib.bench.progress import BarProgress
from django_pgqueue.contrib.bench.report import memory_lines, table_lines
from django_pgqueue.contrib.bench.results import BenchOptions
from django_pgqueue.contrib.bench.run import Bench
from django_pgqueue.contrib.bench.scenarios import report as scenario_report
from django_pgqueue.contrib.bench.scenarios import runner as scenarios
from django_pgqueue.management.options import of
from django_pgqueue.printable import printable
from django_pgqueue.rules import WORKER_OPTIONS

#: ``--scenario herd``'s trickle: jobs per second (issue 35's figures).
HERD_RATE = 10.0

#: Every numeric option's type and range (argparse refuses the rest: exit status 2).
RULES = {**WORKER_OPTIONS, **BENCH_OPTIONS}


def phase_list(text: str) -> list[str]:
    """``--phases``: comma-separated names of :data:`PHASES`, at least one."""
    phases = [p.strip() for p in text.split(",") if p.strip()]
    unknown = sorted(set(phases) - set(PHASES))
    choices = f"choose from {', '.join(PHASES)}"
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown phases {', '.join(unknown)} ({choices})")
    if not phases:
        raise argparse.ArgumentTypeError(f"no phase given ({choices})")
    return phases


class Command(BaseCommand):
    help = (
        "Benchmark the job queue on this database in a scratch queue (deleted afterwards): bulk "
        "and single enqueue, drain by real worker processes, pickup latency, claim speed "
        "with a large history, and the limited claim under a small and a large rate window. "
        "--memory instead measures one worker's RSS over many jobs; --compare drains beside "
        "a raw-SQL floor and pgqueuer."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        defaults = BenchOptions()
        parser.add_argument(
            "--jobs",
            type=of(RULES["jobs"]),
            default=defaults.jobs,
            help=f"No-op jobs bulk-enqueued, then drained (default: {defaults.jobs:,}).",
        )
        parser.add_argument(
            "--processes",
            type=of(RULES["processes"]),
            default=None,
            help=f"Worker processes for the drain (default: {defaults.processes}) or the "
            "scenario (default: 1).",
        )
        parser.add_argument(
            "--threads",
            type=of(RULES["threads"]),
            default=None,
            help=f"Threads per worker process (default: {defaults.threads}; 8 for a scenario).",
        )
        parser.add_argument(
            "--batch-size",
            type=of(RULES["batch_size"]),
            default=None,
            help="Jobs claimed per statement (default: PGQUEUE_BATCH_SIZE).",
        )
        parser.add_argument(
            "--single-samples",
            type=of(RULES["single_samples"]),
            default=defaults.single_samples,
            help=f"enqueue() calls timed (default: {defaults.single_samples:,}).",
        )
        parser.add_argument(
            "--pickup-samples",
            type=of(RULES["pickup_samples"]),
            default=defaults.pickup_samples,
            help=f"Jobs timed from commit to start (default: {defaults.pickup_samples}).",
        )
        parser.add_argument(
            "--history-rows",
            type=of(RULES["history_rows"]),
            default=defaults.history_rows,
            help=f"Finished rows added for history_claim_ratio (default: "
            f"{defaults.history_rows:,}).",
        )
        parser.add_argument(
            "--claim-jobs",
            type=of(RULES["claim_jobs"]),
            default=defaults.claim_jobs,
            help=f"Jobs per claim-throughput run (default: {defaults.claim_jobs:,}).",
        )
        parser.add_argument(
            "--claim-repeats",
            type=of(RULES["claim_repeats"]),
            default=defaults.claim_repeats,
            help=f"Claim-throughput runs per history size, median kept "
            f"(default: {defaults.claim_repeats}).",
        )
        parser.add_argument(
            "--phases",
            type=phase_list,
            default=list(DEFAULT_PHASES),
            help=f"Comma-separated phases to run (default: {','.join(DEFAULT_PHASES)}; "
            f"also: {','.join(sorted(set(PHASES) - set(DEFAULT_PHASES)))}); "
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
            type=of(RULES["memory_jobs"]),
            default=1_000_000,
            help="Jobs run for --memory (default: 1,000,000).",
        )
        parser.add_argument(
            "--compare",
            action="store_true",
            help="Only drain --jobs no-op jobs with --processes processes, by this queue, by "
            "a raw-SQL floor (contrib/bench/floor.sql) and by pgqueuer where it is installed, "
            "in --rounds interleaved rounds; medians, every round, and the ratios.",
        )
        parser.add_argument(
            "--rounds",
            type=of(RULES["rounds"]),
            default=CompareOptions().rounds,
            help=f"Rounds of --compare, interleaved pairs of drains (plain, batch) of "
            f"--phases workflows, and interleaved rounds of --scenario producers (default: "
            f"{CompareOptions().rounds}).",
        )
        self.add_scenario_arguments(parser)
        parser.add_argument(
            "--json",
            action="store_true",
            help="End the output with one line holding the results as a JSON object.",
        )
        parser.add_argument(
            "--no-progress", action="store_true", help="No progress output on stderr."
        )

    def add_scenario_arguments(self, parser: CommandParser) -> None:
        s = scenarios.ScenarioOptions()
        parser.add_argument(
            "--scenario",
            choices=(*scenarios.SCENARIOS, *fleet.FLEET_SCENARIOS),
            help="Instead of the figures above: the queue over time under a fixed load, "
            "through warmup, clean, stress and recovery phases (see docs/performance.md); or "
            "herd (--processes idle workers, a trickle of --pickup-samples jobs at --rate a "
            "second, then a drain of --jobs) or producers (--processes processes committing "
            "one-job transactions, notifications after commit, off, and inside the "
            "transaction): docs/scaling.md.",
        )
        parser.add_argument(
            "--per-command",
            type=of(RULES["per_command"]),
            default=1,
            help="--scenario herd: worker processes per run_jobs command (run_jobs --processes "
            "P listens once for its P, through its relay); --processes is the total, a multiple "
            "of it (default: 1, a command per process).",
        )
        parser.add_argument(
            "--producer-seconds",
            type=of(RULES["producer_seconds"]),
            default=10.0,
            help="--scenario producers: seconds each round of producers runs (default: 10).",
        )
        parser.add_argument(
            "--minutes",
            type=of(RULES["minutes"]),
            default=None,
            help=f"Length of the scenario's stress phase in minutes (default: {s.stress:g} s).",
        )
        for name, default, text in (
            ("rate", None, f"Jobs per second offered ({s.rate:g}; herd: {HERD_RATE:g})"),
            ("stress-rate", None, "high-load: jobs per second offered while stressed (2x rate)"),
            ("job-ms", s.job_ms, "Each job sleeps this long (ms)"),
            ("warmup", s.warmup, "Warm-up phase (s)"),
            ("clean", s.clean, "Clean phase (s)"),
            ("stress", s.stress, "Stress phase (s)"),
            ("recovery", s.recovery, "Recovery phase (s)"),
            ("sample-seconds", s.sample_seconds, "Length of one sample window (s)"),
            (
                "reader-transaction-seconds",
                s.reader_transaction_seconds,
                "active-readers: length of each reader's transaction (s)",
            ),
            (
                "reader-pause",
                s.reader_pause,
                "active-readers: each reader's pause between scans (s)",
            ),
            ("drain-timeout", s.drain_timeout, "Wait this long for the backlog at the end (s)"),
        ):
            parser.add_argument(
                f"--{name}",
                type=of(RULES[name.replace("-", "_")]),
                default=default,
                help=f"{text} (default: {default}).",
            )
        parser.add_argument(
            "--readers",
            type=of(RULES["readers"]),
            default=s.readers,
            help="active-readers: connections.",
        )
        parser.add_argument(
            "--output-dir",
            default=s.output_dir,
            help="Where the scenario writes its samples (.jsonl) and chart (.svg).",
        )

    def handle_fleet(self, options: dict[str, Any], progress: BarProgress) -> None:
        if options["scenario"] == "async":
            self.handle_async(options, progress)
            return
        herd = options["scenario"] == "herd"
        fleet_options = fleet.FleetOptions(
            scenario=options["scenario"],
            processes=options["processes"] or (40 if herd else 64),
            threads=options["threads"] or 1,
            rate=options["rate"] or HERD_RATE,
            jobs=options["pickup_samples"],
            seconds=options["producer_seconds"],
            rounds=options["rounds"],
            per_command=options["per_command"],
            drain_jobs=options["jobs"] if herd else 0,
        )
        run = fleet.run_herd if herd else fleet.run_producers
        result = run(fleet_options, progress)
        for line in result.lines():
            self.stdout.write(printable(line))
        if options["json"]:
            self.stdout.write(json.dumps({"scenario": result.scenario, **result.figures}))

    def handle_async(self, options: dict[str, Any], progress: BarProgress) -> None:
        from django_pgqueue.contrib.bench.asyncjobs import run_async

        result = run_async(
            fleet.FleetOptions(
                scenario="async", processes=1, threads=options["threads"] or 1, jobs=10_000
            ),
            progress,
        )
        for line in result.lines():
            self.stdout.write(printable(line))
        if options["json"]:
            self.stdout.write(json.dumps({"scenario": result.scenario, **result.figures}))

    def handle_scenario(self, options: dict[str, Any], progress: BarProgress) -> None:
        seconds = {
            name: options[name]
            for name in ("warmup", "clean", "stress", "recovery", "drain_timeout")
        }
        if options["minutes"] is not None:
            seconds["stress"] = options["minutes"] * 60
        result = scenarios.ScenarioRun(
            scenarios.ScenarioOptions(
                scenario=options["scenario"],
                rate=options["rate"] or scenarios.ScenarioOptions().rate,
                stress_rate=options["stress_rate"],
                job_ms=options["job_ms"],
                processes=options["processes"] or 1,
                threads=options["threads"] or 8,
                sample_seconds=options["sample_seconds"],
                readers=options["readers"],
                reader_transaction_seconds=options["reader_transaction_seconds"],
                reader_pause=options["reader_pause"],
                output_dir=options["output_dir"],
                **seconds,
            ),
            progress=progress,
        ).run()
        for line in scenario_report.lines(result):
            self.stdout.write(printable(line))
        if options["json"]:
            self.stdout.write(json.dumps(result.as_json(), default=str))

    def handle_compare(self, options: dict[str, Any], progress: BarProgress) -> None:
        result = run_compare(
            CompareOptions(
                jobs=options["jobs"],
                processes=options["processes"],
                threads=options["threads"],
                batch_size=options["batch_size"],
                rounds=options["rounds"],
            ),
            progress,
        )
        for line in result.lines():
            self.stdout.write(printable(line))
        if options["json"]:
            self.stdout.write(json.dumps(result.as_json(), default=str))

    def handle(self, *args: Any, **options: Any) -> None:
        defaults = BenchOptions()
        # The raw stream under Django's OutputWrapper, which would end every write with "\n".
        stream: TextIO = getattr(self.stderr, "_out", sys.stderr)
        progress = BarProgress(stream, enabled=not options["no_progress"])
        if options["scenario"] in fleet.FLEET_SCENARIOS:
            self.handle_fleet(options, progress)
            return
        if options["scenario"]:
            self.handle_scenario(options, progress)
            return
        options["processes"] = options["processes"] or defaults.processes
        options["threads"] = options["threads"] or defaults.threads
        phases = options["phases"]
        if options["compare"]:
            if options["memory"]:
                raise CommandError("--compare and --memory are separate runs: choose one")
            self.handle_compare(options, progress)
            return
        if options["memory"]:
            memory = run_memory(
                jobs=options["memory_jobs"],
                threads=options["threads"],
                batch_size=options["batch_size"],
                progress=progress,
            )
            for line in memory_lines(memory):
                self.stdout.write(printable(line))
            if options["json"]:
                self.stdout.write(json.dumps(memory.__dict__, default=str))
            return

        result = Bench(
            BenchOptions(
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
                rounds=options["rounds"],
            ),
            progress=progress,
        ).run()
        for line in table_lines(result):
            self.stdout.write(printable(line))
        if options["json"]:
            self.stdout.write(json.dumps(result.as_json(), default=str))
