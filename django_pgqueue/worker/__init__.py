"""The worker: ``Worker`` runs one process's loop; ``Supervisor`` runs several processes."""

from __future__ import annotations

from django_pgqueue.worker.counts import WorkerStats
from django_pgqueue.worker.loop import Worker
from django_pgqueue.worker.supervisor import Supervisor

__all__ = ["Supervisor", "Worker", "WorkerStats"]
