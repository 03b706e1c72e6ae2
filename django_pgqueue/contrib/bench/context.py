"""What every phase works with: the options, the scratch queue, its workers, the result."""

from __future__ import annotations

from typing import Any

from django_pgqueue.contrib.bench import database
from django_pgqueue.contrib.bench.progress import NoProgress, Progress
from django_pgqueue.contrib.bench.results import BenchOptions, BenchResult, new_queue_name
from django_pgqueue.contrib.bench.workers import WorkerProcess
from django_pgqueue.contrib.bench.workload import BenchJobs
from django_pgqueue.contrib.bench.workload import register as register_jobs


class BenchContext:
    """A phase's view of a run (:class:`~.run.Bench` adds the phases and runs them).

    Kept apart from :mod:`.run` so that the phases, which :mod:`.run` imports, can name this
    type without importing :mod:`.run` back.
    """

    def __init__(self, options: BenchOptions, progress: Progress | None = None) -> None:
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

    def start_worker(self, **options: Any) -> WorkerProcess:
        """A real ``run_jobs`` serving the scratch queue, stopped by :meth:`cleanup`."""
        child = WorkerProcess(queues=[self.queue], **options)
        self.children.append(child)
        child.start()
        return child

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
