"""``pgqueue_bench --compare``: our drain beside the raw-SQL floor and pgqueuer, on the same
database in the same sitting.

Each of ``--rounds`` rounds drains ``--jobs`` no-op jobs with ``--processes`` processes by each
system in turn, the order rotated by one every round (ours, floor, pgqueuer; then floor,
pgqueuer, ours; ...), so no system always runs first on a cold machine or last on a hot one:

* ``ours``: the ``drain`` phase of a standard run (:class:`~.run.Bench` with
  ``--phases drain``: the bulk enqueue, then ``run_jobs --burst``), the very same code;
* ``floor``: ``floor.sql``'s statements by plain psycopg (:mod:`.floor`);
* ``pgqueuer``: pgqueuer's ``QueueManager`` in drain mode (:mod:`.pgqueuer_drain`), where it is
  installed; elsewhere the report says why not, and the rest goes on.

Per system: the median and every round of jobs/s from the fork of the workers to the last
finish, jobs/s from the first start to the last finish (startup excluded), the workers' CPU
per job and their PostgreSQL backends'; then ours over each of the others, of the medians.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django_pgqueue.contrib.bench import database, floor, pgqueuer_drain
from django_pgqueue.contrib.bench.measurement import machine_info, percentile
from django_pgqueue.contrib.bench.progress import NoProgress, Progress
from django_pgqueue.contrib.bench.report import machine_line
from django_pgqueue.contrib.bench.results import BenchOptions, DrainRun
from django_pgqueue.contrib.bench.run import Bench
from django_pgqueue.contrib.bench.workload import register as register_jobs

SYSTEMS = ("ours", "floor", "pgqueuer")
#: The figures of a :class:`DrainRun`, and their headings in the report.
FIGURES = {
    "per_s_from_fork": "jobs/s from fork",
    "per_s_from_first_start": "jobs/s from 1st start",
    "worker_cpu_us_per_job": "worker CPU us/job",
    "postgres_cpu_us_per_job": "PostgreSQL CPU us/job",
}
RATES = ("per_s_from_fork", "per_s_from_first_start")


@dataclass
class CompareOptions:
    jobs: int = 20_000
    processes: int = 2
    threads: int = 1
    batch_size: int | None = None  # None: PGQUEUE_BATCH_SIZE (ours and pgqueuer's)
    rounds: int = 3


@dataclass
class CompareResult:
    options: CompareOptions
    runs: dict[str, list[DrainRun]] = field(default_factory=dict)
    #: Systems not run, and why.
    skipped: dict[str, str] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def median(self, system: str) -> dict[str, float | None]:
        rounds = [run.figures() for run in self.runs[system]]
        medians: dict[str, float | None] = {}
        for name in FIGURES:
            values = [value for r in rounds if (value := r[name]) is not None]
            medians[name] = round(percentile(values, 50), 1) if values else None
        return medians

    def ratios(self) -> dict[str, dict[str, float]]:
        """Ours over each other system, of the median rates."""
        if "ours" not in self.runs:
            return {}
        ours = self.median("ours")
        found = {}
        for system in self.runs:
            if system == "ours":
                continue
            theirs = self.median(system)
            found[f"ours/{system}"] = {
                name: round(ours[name] / theirs[name], 3)  # type: ignore[operator]
                for name in RATES
            }
        return found

    def as_json(self) -> dict[str, Any]:
        systems: dict[str, Any] = {}
        for system in SYSTEMS:
            if system in self.runs:
                systems[system] = {
                    "median": self.median(system),
                    "rounds": [
                        {**run.figures(), "checkpoints": run.checkpoints}
                        for run in self.runs[system]
                    ],
                }
            elif system in self.skipped:
                systems[system] = {"skipped": self.skipped[system]}
        return {
            "systems": systems,
            "ratios": self.ratios(),
            "machine": self.machine,
            "settings": self.settings,
        }

    def lines(self) -> list[str]:
        options = self.options
        lines = [
            "",
            f"--compare: {options.jobs:,} no-op jobs drained by {options.processes} processes, "
            f"{options.rounds} rounds, the order rotated each round",
            "  jobs/s from fork: from forking the workers to the last job's finish (startup "
            "included)",
            "  jobs/s from 1st start: from the first job's start (its claim) to the last "
            "finish (startup excluded)",
            "  worker CPU: rusage of the reaped worker processes; PostgreSQL CPU: their "
            "backends' (/proc), per job",
            "  checkpoints: the server's during the round's drain (any database's): each makes "
            "the next change of every page write it whole to the WAL",
            "",
        ]
        head = ["system", "round", *FIGURES.values(), "checkpoints"]
        rows = [head]
        for system in SYSTEMS:
            if system not in self.runs:
                continue
            rows.append([system, "median", *_cells(self.median(system)), ""])
            for number, run in enumerate(self.runs[system], 1):
                rows.append(["", str(number), *_cells(run.figures()), str(run.checkpoints)])
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        for row in rows:
            cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
            cells += [cell.rjust(width) for cell, width in zip(row[2:], widths[2:], strict=True)]
            lines.append("  ".join(cells).rstrip())
        for system, why in self.skipped.items():
            lines.append(f"{system}: not run: {why}")
        lines.append("")
        for name, ratio in self.ratios().items():
            lines.append(
                f"{name}: {ratio['per_s_from_fork']:.3f} from fork, "
                f"{ratio['per_s_from_first_start']:.3f} from 1st start (of the medians)"
            )
        lines.append(machine_line(self.machine))
        lines.append("settings: " + ", ".join(f"{k}={v}" for k, v in self.settings.items()))
        return lines


def _cells(figures: dict[str, float | None]) -> list[str]:
    cells = []
    for name, value in figures.items():
        if value is None:
            cells.append("-")
        else:
            cells.append(f"{value:,.0f}" if name in RATES else f"{value:,.1f}")
    return cells


def drain_ours(options: CompareOptions, progress: Progress) -> DrainRun:
    """The ``drain`` phase of a standard run (with the ``enqueue`` it needs), as it is."""
    result = Bench(
        BenchOptions(
            jobs=options.jobs,
            processes=options.processes,
            threads=options.threads,
            batch_size=options.batch_size,
            phases=["drain"],
        ),
        progress,
    ).run()
    details = result.details
    return DrainRun(
        system="ours",
        jobs=options.jobs,
        seconds_from_fork=details["drain_s"],
        seconds_from_first_start=details["drain_from_first_start_s"],
        worker_cpu_us_per_job=details["drain_worker_cpu_us_per_job"],
        postgres_cpu_us_per_job=details.get("drain_postgres_cpu_us_per_job"),
    )


def drain_floor(options: CompareOptions, progress: Progress) -> DrainRun:
    return floor.drain(options.jobs, options.processes, progress)


def drain_pgqueuer(options: CompareOptions, progress: Progress) -> DrainRun:
    return pgqueuer_drain.drain(options.jobs, options.processes, _batch_size(options), progress)


DRAINS: dict[str, Callable[[CompareOptions, Progress], DrainRun]] = {
    "ours": drain_ours,
    "floor": drain_floor,
    "pgqueuer": drain_pgqueuer,
}


def _batch_size(options: CompareOptions) -> int:
    return BenchOptions(batch_size=options.batch_size).resolved_batch_size()


def run_compare(options: CompareOptions, progress: Progress | None = None) -> CompareResult:
    progress = progress or NoProgress()
    register_jobs()  # before any worker is forked
    result = CompareResult(options)
    systems = list(SYSTEMS)
    why = pgqueuer_drain.missing()
    if why is not None:
        result.skipped["pgqueuer"] = f"not installed ({why})"
        systems.remove("pgqueuer")
        progress.start(f"pgqueuer: not run, not installed ({why})")
        progress.finish("")
    result.machine = machine_info()
    result.settings = settings_of(options, with_pgqueuer=why is None)
    result.runs = {system: [] for system in systems}
    for index in range(options.rounds):
        shift = index % len(systems)
        order = systems[shift:] + systems[:shift]
        progress.start(f"round {index + 1} of {options.rounds}: {', '.join(order)}")
        progress.finish("")
        for system in order:
            before = database.checkpoints()
            run = DRAINS[system](options, progress)
            run = dataclasses.replace(run, checkpoints=database.checkpoints() - before)
            result.runs[system].append(run)
    result.machine["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    return result


def settings_of(options: CompareOptions, *, with_pgqueuer: bool) -> dict[str, Any]:
    found: dict[str, Any] = {
        "jobs": options.jobs,
        "processes": options.processes,
        "threads": options.threads,
        "rounds": options.rounds,
        "batch_size": _batch_size(options),
        "floor_batch_size": floor.BATCH_SIZE,
        # Which floor.sql the floor ran: the ratio's denominator.
        "floor_sql_sha256": hashlib.sha256(floor.FLOOR_SQL.read_bytes()).hexdigest()[:12],
    }
    if with_pgqueuer:
        found["pgqueuer"] = pgqueuer_drain.version()
        found["pgqueuer_event_loop"] = pgqueuer_drain.event_loop()
    return found
