"""What the dashboard and ``pgqueue_status`` show: each queue's numbers and the last hour's.

:func:`django_pgqueue.stats.queue_report` reads them from the database into these classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django_pgqueue.states import Event, JobStatus
from django_pgqueue.stats.counts import Count, add_counts
from django_pgqueue.stats.workers import WorkerInfo

#: Minutes in the throughput chart.
MINUTES = 60


@dataclass
class QueueStats:
    queue: str
    runnable: Count
    scheduled: Count
    running: Count
    completed: Count
    dead: Count
    #: How long the oldest runnable job has waited since its ``run_after`` (None: none waits).
    oldest_runnable_age: timedelta | None
    completed_last_minute: Count
    completed_last_hour: Count
    failed_last_hour: Count
    #: Live workers serving this queue, and their threads.
    workers: int = 0
    threads: int = 0
    #: Jobs waiting for the jobs they were enqueued after (docs/workflows.md).
    waiting: Count = field(default_factory=lambda: Count(0))

    @classmethod
    def empty(cls, queue: str) -> QueueStats:
        zero = Count(0)
        return cls(queue, zero, zero, zero, zero, zero, None, zero, zero, zero)

    @property
    def pending(self) -> Count:
        return add_counts(self.runnable, self.scheduled)

    def as_dict(self) -> dict[str, Any]:
        counts = {
            "runnable": self.runnable,
            "scheduled": self.scheduled,
            JobStatus.RUNNING.value: self.running,
            JobStatus.COMPLETED.value: self.completed,
            JobStatus.DEAD.value: self.dead,
            JobStatus.WAITING.value: self.waiting,
            "completed_last_minute": self.completed_last_minute,
            "completed_last_hour": self.completed_last_hour,
            "failed_last_hour": self.failed_last_hour,
        }
        age = self.oldest_runnable_age
        return {
            "queue": self.queue,
            **{name: c.value for name, c in counts.items()},
            "oldest_runnable_age_seconds": None if age is None else round(age.total_seconds(), 3),
            "workers": self.workers,
            "threads": self.threads,
            "approximate": {name: c.kind for name, c in counts.items() if not c.exact},
        }


@dataclass(frozen=True)
class Minute:
    """One minute of the chart: ``start`` to ``start + 1 minute``."""

    start: datetime
    completed: int
    failed: int
    #: False when the window cap cut this minute off (its numbers are then too low).
    complete: bool = True


@dataclass
class LastHour:
    """What finished in the last hour: completions and failed attempts per queue and minute."""

    #: (queue, kind, minute) -> count; minute 0 is the last minute.
    counts: dict[tuple[str, str, int], int]
    capped: bool
    #: With the cap hit: the oldest minute (as ``minute``) whose finished jobs were all read.
    complete_minutes: int = MINUTES

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[Any]], cap: int) -> LastHour:
        """From rows of (queue, kind, minute, count); the row of kind ``scanned`` says how many
        finished jobs were read (at most ``cap``) and the minute of the oldest."""
        counts: dict[tuple[str, str, int], int] = {}
        scanned = 0
        oldest_minute = MINUTES
        for queue, kind, minute, n in rows:
            if kind == Event.SCANNED:
                scanned, oldest_minute = n, minute
            else:
                counts[(queue, kind, minute)] = n
        capped = scanned >= cap
        # The minute holding the oldest row read may be partly cut off; newer ones are whole.
        return cls(counts, capped, oldest_minute if capped else MINUTES)

    @property
    def queues(self) -> set[str]:
        return {queue for queue, _, _ in self.counts}

    def count(self, queue: str, kind: str, *, last_minute: bool = False) -> Count:
        total = sum(
            n
            for (q, k, minute), n in self.counts.items()
            if q == queue and k == kind and (minute == 0 or not last_minute)
        )
        if self.capped and not (last_minute and self.complete_minutes > 0):
            return Count(total, "at_least")
        return Count(total)

    def minutes(self, now: datetime) -> list[Minute]:
        completed = [0] * MINUTES
        failed = [0] * MINUTES
        for (_, kind, minute), n in self.counts.items():
            if 0 <= minute < MINUTES:
                (completed if kind == Event.COMPLETED else failed)[minute] += n
        return [
            Minute(
                start=now - timedelta(minutes=m + 1),
                completed=completed[m],
                failed=failed[m],
                complete=not self.capped or m < self.complete_minutes,
            )
            for m in reversed(range(MINUTES))
        ]


@dataclass(frozen=True)
class QueueSnapshot:
    """The queues' counts and the workers seen lately, without the last hour's throughput."""

    generated_at: datetime
    queues: list[QueueStats]
    workers: list[WorkerInfo]
    #: True when every count is exact (small table).
    exact: bool
    duration: float


@dataclass
class QueueReport:
    generated_at: datetime
    queues: list[QueueStats]
    workers: list[WorkerInfo]
    #: The last hour, oldest minute first.
    minutes: list[Minute]
    #: True when every count is exact (small table).
    exact: bool
    #: More than ``WINDOW_CAP`` jobs finished in the last hour: only the newest were read.
    window_capped: bool
    retention: timedelta
    dead_retention: timedelta | None
    duration: float = 0.0
    notes: list[str] = field(default_factory=list)

    def queue(self, name: str) -> QueueStats:
        for stats in self.queues:
            if stats.queue == name:
                return stats
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at.isoformat(),
            "exact": self.exact,
            "window_capped": self.window_capped,
            "retention_seconds": self.retention.total_seconds(),
            "dead_retention_seconds": (
                None if self.dead_retention is None else self.dead_retention.total_seconds()
            ),
            "queues": [q.as_dict() for q in self.queues],
            "workers": [
                {
                    "worker_id": w.worker_id,
                    "hostname": w.hostname,
                    "pid": w.pid,
                    "queues": w.queues,
                    "threads": w.threads,
                    "state": w.state,
                    "started_at": w.started_at.isoformat(),
                    "last_seen_at": w.last_seen_at.isoformat(),
                    "jobs_done": w.jobs_done,
                    "abandoned": w.abandoned,
                }
                for w in self.workers
            ],
            "last_hour": [
                {
                    "start": m.start.isoformat(),
                    Event.COMPLETED.value: m.completed,
                    Event.FAILED.value: m.failed,
                }
                for m in self.minutes
            ],
        }
