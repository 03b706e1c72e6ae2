"""One benchmark run: the scratch queue, the selected phases in order, and the clean-up."""

from __future__ import annotations

import os
import time
from typing import Any

from django_pgqueue.bench import database
from django_pgqueue.bench.jobs import BenchJobs
from django_pgqueue.bench.jobs import register as register_jobs
from django_pgqueue.bench.measurement import machine_info
from django_pgqueue.bench.phases import PHASES
from django_pgqueue.bench.progress import NoProgress, Progress
from django_pgqueue.bench.results import BenchOptions, BenchResult, new_queue_name
from django_pgqueue.bench.workers import WorkerProcess
from django_pgqueue.conf import settings
from django_pgqueue.sql import TABLE


class Bench:
    """What every phase works with: the options, the scratch queue, the result it fills."""

    def __init__(self, options: BenchOptions, progress: Progress | None = None) -> None:
        self.phases = list(PHASES) if options.phases is None else list(options.phases)
        unknown = set(self.phases) - set(PHASES)
        if unknown:
            raise ValueError(f"Unknown phases: {', '.join(sorted(unknown))}")
        self.options = options
        self.progress: Progress = progress or NoProgress()
        self.queue = new_queue_name()
        self.mark = 0  # every row of the scratch queue has a greater id
        self.children: list[WorkerProcess] = []
        self.result = BenchResult()

    @property
    def jobs(self) -> BenchJobs:
        return register_jobs()

    @property
    def noop(self) -> Any:
        return self.jobs.noop.using(queue=self.queue)

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

    def cleanup(self) -> None:
        """Stop our workers and delete every row of the scratch queue (runs on Ctrl-C too)."""
        for child in self.children:
            child.stop()
        self.children.clear()
        database.drop_broken_connection()
        database.delete_queue(self.queue, self.mark)
        database.delete_worker_rows(self.queue)
        # Leave no dead rows behind for the next run (or the real queues) to step over.
        database.vacuum_analyze()

    def start_worker(self, **options: Any) -> WorkerProcess:
        """A real ``run_jobs`` serving the scratch queue, stopped by :meth:`cleanup`."""
        child = WorkerProcess(queues=[self.queue], **options)
        self.children.append(child)
        child.start()
        return child

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
