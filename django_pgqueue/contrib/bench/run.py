"""One benchmark run: the scratch queue, the selected phases in order, and the clean-up."""

from __future__ import annotations

import os
import time
from typing import Any

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.context import BenchContext
from django_pgqueue.contrib.bench.measurement import machine_info
from django_pgqueue.contrib.bench.phases import PHASES
from django_pgqueue.contrib.bench.progress import Progress
from django_pgqueue.contrib.bench.results import BenchOptions, BenchResult
from django_pgqueue.sql import TABLE


class Bench(BenchContext):
    """One run: the selected phases (and those they need) in order, then the clean-up."""

    def __init__(self, options: BenchOptions, progress: Progress | None = None) -> None:
        self.phases = list(PHASES) if options.phases is None else list(options.phases)
        unknown = set(self.phases) - set(PHASES)
        if unknown:
            raise ValueError(f"Unknown phases: {', '.join(sorted(unknown))}")
        super().__init__(options, progress)

    def to_run(self) -> list[str]:
        """The selected phases and those they need, in the registry's order."""
        wanted = set(self.phases)
        for name in self.phases:
            wanted.update(PHASES[name].needs)
        return [name for name in PHASES if name in wanted]

    def run(self) -> BenchResult:
        self.jobs  # noqa: B018 - registered before any worker is forked
        self.mark = database.max_job_id()
        self.result.machine = machine_info()
        self.result.settings = self.queue_settings()
        others = database.workers_serving_every_queue()
        if others:
            # They would claim the scratch queue's jobs too (and fail them: they don't know the
            # bench's job names), so the figures would not be this queue's.
            self.result.details["warning"] = (
                f"workers serving every queue are running ({', '.join(others)}): they take "
                "jobs from the scratch queue too; stop them or give them --queue"
            )
            self.progress.start("warning: " + self.result.details["warning"])
            self.progress.finish("")
        try:
            # Every run starts from a vacuumed table, so the dead rows of an earlier run (or of
            # anything else) don't make it slower than the next.
            self.progress.start(f"VACUUM (ANALYZE) {TABLE}")
            started = time.perf_counter()
            database.vacuum_analyze()
            self.progress.finish(f"{time.perf_counter() - started:.1f} s")
            for name in self.to_run():
                PHASES[name].run(self)
        finally:
            self.cleanup()
        self.result.machine["load_average_1m_end"] = round(os.getloadavg()[0], 2)
        return self.result

    def queue_settings(self) -> dict[str, Any]:
        options = self.options
        return {
            "queue": self.queue,
            "jobs": options.jobs,
            "processes": options.processes,
            "threads": options.threads,
            "batch_size": options.resolved_batch_size(),
            "flush_size": settings.FLUSH_SIZE,
            "flush_interval": settings.FLUSH_INTERVAL,
            "listen": settings.LISTEN,
            "poll_interval": settings.POLL_INTERVAL,
            "single_samples": options.single_samples,
            "pickup_samples": options.pickup_samples,
            "history_rows": options.history_rows,
            "claim_jobs": options.claim_jobs,
            "phases": list(self.phases),
        }
