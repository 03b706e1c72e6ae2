"""``pgqueue_bench --scenario NAME``: the queue under load, phase by phase, over time.

A producer offers ``rate`` jobs per second (``enqueue_many`` every 10 ms) of a ``job_ms``
job to a real ``run_jobs`` worker (``processes`` x ``threads``) on a scratch queue, through
four phases:

* ``warmup``: load only, not judged;
* ``clean``: load only, the reference figures;
* ``stress``: the scenario's pressure on top of the load (``idle-in-tx``: one connection
  idle in a transaction holding an XID; ``active-readers``: ``readers`` REPEATABLE READ
  connections scanning the job table; ``high-load``: ``stress_rate`` jobs per second);
* ``recovery``: the pressure gone, the load on.

Every ``sample_seconds`` a window is sampled: jobs offered and completed, start latency
(``started_at - run_after``) percentiles, queue depth, dead tuples and index sizes of the
queue's tables. The samples go to a JSON-lines file, the chart to an SVG file, and each phase
is summarized (a table, or JSON).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.measurement import machine_info
from django_pgqueue.contrib.bench.progress import NoProgress, Progress
from django_pgqueue.contrib.bench.results import BenchError, new_queue_name
from django_pgqueue.contrib.bench.scenarios import chart, pressure, samples
from django_pgqueue.contrib.bench.scenarios.load import Producer
from django_pgqueue.contrib.bench.workers import WorkerProcess

SCENARIOS = ("idle-in-tx", "active-readers", "high-load")
PHASES = ("warmup", "clean", "stress", "recovery")


@dataclass
class ScenarioOptions:
    scenario: str = "idle-in-tx"
    rate: float = 1000.0
    stress_rate: float | None = None  # high-load: default twice ``rate``
    job_ms: float = 1.0
    processes: int = 1
    threads: int = 8
    warmup: float = 15.0
    clean: float = 45.0
    stress: float = 90.0
    recovery: float = 45.0
    sample_seconds: float = 5.0
    readers: int = 4
    reader_transaction_seconds: float = 30.0
    reader_pause: float = pressure.READER_PAUSE
    output_dir: str = "."
    #: After the last phase, how long to wait for the backlog to drain before counting it.
    drain_timeout: float = 120.0

    def durations(self) -> dict[str, float]:
        return {
            "warmup": self.warmup,
            "clean": self.clean,
            "stress": self.stress,
            "recovery": self.recovery,
        }

    def resolved_stress_rate(self) -> float:
        if self.scenario != "high-load":
            return self.rate
        return self.stress_rate if self.stress_rate is not None else 2 * self.rate


@dataclass
class ScenarioResult:
    scenario: str
    phases: list[samples.PhaseSummary] = field(default_factory=list)
    samples: list[samples.Sample] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    server: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    samples_path: str = ""
    chart_path: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "phases": [p.as_json() for p in self.phases],
            "machine": self.machine,
            "server": self.server,
            "settings": self.settings,
            "details": self.details,
            "samples_path": self.samples_path,
            "chart_path": self.chart_path,
        }


def _pressure(options: ScenarioOptions, queue: str) -> pressure.Pressure:
    if options.scenario == "idle-in-tx":
        return pressure.IdleInTransaction(f"pgqueue bench holder {queue}")
    if options.scenario == "active-readers":
        return pressure.RepeatableReadReaders(
            f"pgqueue bench reader {queue}",
            count=options.readers,
            transaction_seconds=options.reader_transaction_seconds,
            pause=options.reader_pause,
        )
    return pressure.Pressure()


class ScenarioRun:
    def __init__(self, options: ScenarioOptions, progress: Progress | None = None) -> None:
        if options.scenario not in SCENARIOS:
            raise ValueError(f"Unknown scenario {options.scenario!r}: one of {SCENARIOS}")
        self.options = options
        self.progress: Progress = progress or NoProgress()
        self.queue = new_queue_name()
        self.result = ScenarioResult(options.scenario)
        self.producer = Producer(self.queue, options.rate, options.job_ms)
        self.pressure = _pressure(options, self.queue)
        self.worker: WorkerProcess | None = None
        self.mark = 0

    def run(self) -> ScenarioResult:
        options = self.options
        self.mark = database.max_job_id()
        self.result.machine = machine_info()
        self.result.server = samples.server_settings()
        self.result.settings = {"queue": self.queue, **asdict(options)}
        self.result.settings["stress_rate"] = options.resolved_stress_rate()
        out = Path(options.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        samples_path = out / f"pgqueue-bench-{options.scenario}-{stamp}.jsonl"
        chart_path = out / f"pgqueue-bench-{options.scenario}-{stamp}.svg"
        try:
            database.vacuum_analyze()
            self.worker = WorkerProcess(
                queues=[self.queue],
                processes=options.processes,
                threads=options.threads,
                worker_id=f"{self.queue}:scenario",
            )
            self.worker.start()
            with samples_path.open("w") as stream:
                self._phases(lambda s: stream.write(json.dumps(s.as_json()) + "\n"))
        finally:
            self.pressure.stop()
            self.producer.stop()
            self._finish()
        self.result.samples_path = str(samples_path)
        self.result.chart_path = str(chart_path)
        chart_path.write_text(chart.render(self.result.samples, self.result.phases, self.title()))
        return self.result

    def title(self) -> str:
        o = self.options
        server = self.result.server
        return (
            f"pgqueue_bench --scenario {o.scenario}: {o.rate:,.0f} jobs/s offered, "
            f"{o.processes}x{o.threads} threads, {o.job_ms:g} ms jobs; PostgreSQL "
            f"{server.get('server_version', '?')}, autovacuum {server.get('autovacuum', '?')}"
        )

    def _phases(self, write: Callable[[samples.Sample], object]) -> None:
        options = self.options
        durations = options.durations()
        started = time.time()
        self.producer.start()
        window_start = started
        finished_total = 0
        for phase in PHASES:
            length = durations[phase]
            if length <= 0:
                continue
            self.progress.start(f"{options.scenario}: {phase} ({length:g} s)", None)
            if phase == "stress":
                self.pressure.start()
                self.producer.rate = options.resolved_stress_rate()
            phase_start = window_start
            phase_end = phase_start + length
            phase_samples = []
            while window_start < phase_end - 1e-6:
                window_end = min(window_start + options.sample_seconds, phase_end)
                # Sample a little after the window ends: outcomes are written in batches.
                self._sleep_until(window_end + 1.0)
                sample = self._sample(phase, started, window_start, window_end, finished_total)
                finished_total += sample.completed
                phase_samples.append(sample)
                self.result.samples.append(sample)
                write(sample)
                window_start = window_end
            if phase == "stress":
                self.pressure.stop()
                self.producer.rate = options.rate
                self.result.details.update(self.pressure.describe())
            _, pcts = samples.finished_between(self.queue, phase_start, phase_end)
            summary = samples.summarize(phase, phase_samples, pcts[:3])
            self.result.phases.append(summary)
            self.progress.finish(
                f"{summary.completed_per_s:,.0f}/{summary.offered_per_s:,.0f} jobs/s, "
                f"p95 {summary.p95_ms} ms, depth <= {summary.max_depth:,}"
            )

    def _sleep_until(self, wall_time: float) -> None:
        while True:
            pause = wall_time - time.time()
            if pause <= 0:
                return
            if self.worker is not None and self.worker.poll() is not None:
                raise BenchError(f"run_jobs exited with status {self.worker.exit_code}")
            if self.producer.error:
                raise BenchError(f"The producer failed: {self.producer.error}")
            time.sleep(min(pause, 0.2))

    def _sample(
        self, phase: str, started: float, start: float, end: float, finished_before: int
    ) -> samples.Sample:
        completed, (p50, p95, p99, highest) = samples.finished_between(self.queue, start, end)
        dead, live, indexes = samples.table_stats()
        offered = self.producer.produced_at(end) - self.producer.produced_at(start)
        seconds = end - start
        return samples.Sample(
            t=round(end - started, 2),
            seconds=round(seconds, 2),
            phase=phase,
            offered=offered,
            completed=completed,
            offered_per_s=round(offered / seconds, 1),
            completed_per_s=round(completed / seconds, 1),
            p50_ms=p50,
            p95_ms=p95,
            p99_ms=p99,
            max_ms=highest,
            depth=self.producer.produced_at(end) - finished_before - completed,
            dead_tuples=dead,
            live_tuples=live,
            index_kib=indexes,
            load_1m=samples.load_1m(),
        )

    def _finish(self) -> None:
        """Let the backlog drain, count what is left, stop the worker, delete the rows.

        Also after a failure: the worker is stopped whatever happens while draining, and a
        connection the failure broke (a server restart, say) is opened afresh first, so a
        failed run leaves neither a ``run_jobs`` process nor its rows behind.
        """
        self.result.details["producer"] = self.producer.describe()
        try:
            database.drop_broken_connection()
            deadline = time.monotonic() + self.options.drain_timeout
            unfinished = -1
            while time.monotonic() < deadline:
                unfinished = samples.unfinished(self.queue)
                if unfinished == 0 or self.worker is None or self.worker.poll() is not None:
                    break
                time.sleep(0.5)
            self.result.details["unfinished_at_end"] = unfinished
            self.result.machine["load_average_1m_end"] = samples.load_1m()
            self.result.details["uptime"] = _uptime()
        finally:
            if self.worker is not None:
                self.worker.stop()
        database.delete_queue(self.queue, self.mark)
        database.delete_worker_rows(self.queue)
        database.vacuum_analyze()


def _uptime() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return "load average: " + ", ".join(f"{v:.2f}" for v in load)
