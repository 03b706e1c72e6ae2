"""How many jobs a worker claims, and when: its capacity and the recent job duration."""

from __future__ import annotations

from django_pgqueue.operations import Outcome

# How far ahead jobs are claimed: enough to keep the executors busy for about this long.
PREFETCH_WINDOW = 0.2


class Capacity:
    """Capacity is the executors plus enough prefetch to keep them busy for ~PREFETCH_WINDOW
    at the recent job duration, capped by ``batch_size``: no-op jobs are claimed 100 at a time,
    slow jobs one per free thread, so a worker never sits on jobs others could run."""

    def __init__(self, threads: int, batch_size: int) -> None:
        self.threads = threads
        self.batch_size = batch_size
        self.avg_duration = 0.01

    def record(self, outcome: Outcome) -> None:
        """Fold one attempt's duration into the recent average."""
        if outcome.finished_at is not None:
            seconds = (outcome.finished_at - outcome.started_at).total_seconds()
            self.avg_duration = 0.9 * self.avg_duration + 0.1 * seconds

    def claim_size(self, in_flight: int, buffered: int) -> int:
        """How many jobs to claim now (0: not yet), with ``in_flight`` jobs claimed and not
        written back, ``buffered`` of them finished.

        It claims once half the capacity is free (or a thread has nothing queued), so each
        statement claims a real batch.
        """
        prefetch = int(self.threads * PREFETCH_WINDOW / max(self.avg_duration, 1e-6))
        capacity = self.threads + min(self.batch_size, prefetch)
        free = capacity - in_flight
        if free <= 0:
            return 0
        if in_flight - buffered < self.threads or free * 2 >= capacity:
            return free
        return 0
