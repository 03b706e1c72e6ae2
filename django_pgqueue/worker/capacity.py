"""How many jobs a worker claims, and when: its capacity, the recent job duration, the backlog."""

from __future__ import annotations

from django_pgqueue.operations import Outcome

# How far ahead jobs are claimed: enough to keep the executors busy for about this long.
PREFETCH_WINDOW = 0.2
#: The most jobs a claim asks for at first, and again after a claim that came back short.
START_BATCH = 100


class Capacity:
    """Capacity is the executors plus enough prefetch to keep them busy for ~PREFETCH_WINDOW
    at the recent job duration, capped by the claim size: no-op jobs are claimed in batches,
    slow jobs one per free thread, so a worker never sits on more than about 0.2 s of work
    others could run.

    The claim size follows the backlog: it starts at ``START_BATCH`` (``batch_size`` if
    smaller), doubles after each claim that came back full, up to ``batch_size``, and falls
    back after one that came back short (the backlog ran out). Each claim and outcome write is
    a statement with a cost of its own on the server besides its rows (measured: 65-85 us of
    PostgreSQL CPU a no-op job in claims of 100, 45-55 in claims of 400 or more), so a deep
    backlog is drained in large batches while a trickle is claimed as it comes.
    """

    def __init__(self, threads: int, batch_size: int) -> None:
        self.threads = threads
        self.batch_size = batch_size
        #: The most the next claim asks for besides one job per thread.
        self.limit = min(START_BATCH, batch_size)
        self.avg_duration = 0.01
        #: How long the recent claims took, answer included (seconds).
        self.claim_seconds = 0.0

    def record(self, outcome: Outcome) -> None:
        """Fold one attempt's duration into the recent average."""
        if outcome.finished_at is not None:
            seconds = (outcome.finished_at - outcome.started_at).total_seconds()
            self.avg_duration = 0.9 * self.avg_duration + 0.1 * seconds

    def claimed(self, asked: int, got: int, seconds: float) -> None:
        """A claim asked for ``asked`` jobs, took ``got`` and ``seconds``: full and as large as
        the claim size allowed (a backlog), the next may be twice as large; short, back to the
        start."""
        self.claim_seconds = 0.7 * self.claim_seconds + 0.3 * seconds
        if got < asked:
            self.limit = min(START_BATCH, self.batch_size)
        elif asked >= self.limit:
            self.limit = min(self.limit * 2, self.batch_size)

    def claim_size(self, in_flight: int, buffered: int) -> int:
        """How many jobs to claim now (0: not yet), with ``in_flight`` jobs claimed and not
        written back, ``buffered`` of them finished.

        It claims once half the capacity is free (or a thread has nothing queued), so each
        statement claims a real batch; or once a quarter is free if what is queued would run
        out before two claims' time (a loaded server's claim of hundreds of jobs takes tens
        of milliseconds, which fast jobs would otherwise spend waiting for it).
        """
        prefetch = int(self.threads * PREFETCH_WINDOW / max(self.avg_duration, 1e-6))
        capacity = self.threads + min(self.limit, prefetch)
        free = capacity - in_flight
        if free <= 0:
            return 0
        queued = in_flight - buffered - self.threads  # claimed and not started
        if queued < 0 or free * 2 >= capacity:
            return free
        if (
            free * 4 >= capacity
            and queued * self.avg_duration < 2 * self.claim_seconds * self.threads
        ):
            return free
        return 0
