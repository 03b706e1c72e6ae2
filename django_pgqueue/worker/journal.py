"""What a supervised worker process started and finished, kept where its supervisor can read it.

A job can kill the process that runs it (``os._exit``, a segfault, the OOM killer). The
supervisor then reads the dead child's journal and sets things right on its own connection
(:func:`recover`):

* outcomes the child had not written yet are written (a job that completed is never run again);
* the jobs it had started and not finished are the ones that were running when it died: each is
  charged one failed attempt (``WorkerCrashed``), retried or dead after its own ``max_attempts``;
  when it died while ``run_jobs`` shut down, they are handed back interrupted instead (no
  attempt spent, within ``PGQUEUE_MAX_INTERRUPTIONS``);
* jobs it had claimed but not started are handed back without spending an attempt.

The journal is a file mapped into the worker's memory (``mmap``), so recording a job costs a
memory copy, not a system call: an 8-byte header holds where the data ends, then lines
``S <id>`` (started), ``C <id> <claim token> <started> <finished> <result json>``
(completed; -1: no token), ``O <json>`` (another outcome; in both, times in microseconds since
the epoch) and ``W <id,...>``
(outcomes written). The header is updated after each line, so a line is either there whole
or not at all when the process dies; the page cache survives the process (a machine crash
loses it, and then the claim's stale-job recovery takes over). When the journal fills up it
is rewritten from what is still open.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import threading
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from django_pgqueue import operations
from django_pgqueue.exceptions import WorkerCrashed
from django_pgqueue.operations import Database, Outcome
from django_pgqueue.operations.outcomes import (
    epoch_micros,
    epoch_micros_or_none,
    from_epoch_micros,
)
from django_pgqueue.printable import get_logger
from django_pgqueue.states import Attempt, JobStatus

logger = get_logger("django_pgqueue.worker")

#: Size of the mapped file (sparse: only what is written takes memory and disk).
CAPACITY = 32 * 1024 * 1024
_HEADER = struct.Struct("<Q")

_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _time(micros: int | None) -> datetime | None:
    return None if micros is None else from_epoch_micros(micros)


def _encode(o: Outcome) -> bytes:
    if o.status == JobStatus.COMPLETED and o.finished_at is not None and o.result_json:
        # The common case, without a JSON encoder: result_json is compact JSON (no newline).
        return b"C %d %d %d %d %s\n" % (
            o.job_id,
            -1 if o.claim_token is None else o.claim_token,
            epoch_micros(o.started_at),
            epoch_micros(o.finished_at),
            o.result_json.encode(),
        )
    # A flat list, not dataclasses.asdict (which deep-copies).
    fields = [
        o.job_id,
        o.status,
        epoch_micros_or_none(o.started_at),
        epoch_micros_or_none(o.finished_at),
        epoch_micros_or_none(o.run_after),
        o.result_json,
        o.error,
        o.error_entry_json,
        o.outcome,
        o.claim_token,
    ]
    return b"O " + _ENCODER.encode(fields).encode() + b"\n"


def _decode(kind: str, data: str) -> Outcome:
    if kind == "C":
        job_id, token, started, finished, result = data.split(" ", 4)
        return Outcome(
            job_id=int(job_id),
            claim_token=None if token == "-1" else int(token),
            status=JobStatus.COMPLETED,
            started_at=from_epoch_micros(int(started)),
            finished_at=from_epoch_micros(int(finished)),
            result_json=result,
        )
    job_id, status, started, finished, run_after, result, error, entry, outcome, token = json.loads(
        data
    )
    return Outcome(
        claim_token=token,
        job_id=job_id,
        status=status,
        started_at=_time(started),  # type: ignore[arg-type]
        finished_at=_time(finished),
        run_after=_time(run_after),
        result_json=result,
        error=error,
        error_entry_json=entry,
        outcome=outcome,
    )


class Journal:
    """The child's side: record starts, outcomes and writes (thread-safe)."""

    def __init__(self, path: Path, capacity: int = CAPACITY) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, capacity)
            self._map = mmap.mmap(fd, capacity)
        finally:
            os.close(fd)
        self._capacity = capacity
        self._lock = threading.Lock()
        self._started: set[int] = set()
        self._outcomes: dict[int, bytes] = {}
        self._end = _HEADER.size
        _HEADER.pack_into(self._map, 0, self._end)

    def _append(self, line: bytes) -> None:
        end = self._end + len(line)
        if end > self._capacity:
            self._compact()
            end = self._end + len(line)
            if end > self._capacity:
                logger.warning("Journal full: a line of %d bytes is not recorded", len(line))
                return
        self._map[self._end : end] = line
        self._end = end
        _HEADER.pack_into(self._map, 0, end)

    def _compact(self) -> None:
        """Rewrite the journal as what is still open (under the lock)."""
        state = b"".join(b"S %d\n" % i for i in self._started)
        state += b"".join(self._outcomes.values())
        end = _HEADER.size + len(state)
        if end > self._capacity:
            return
        _HEADER.pack_into(self._map, 0, _HEADER.size)  # empty while it is rewritten
        self._map[_HEADER.size : end] = state
        self._end = end
        _HEADER.pack_into(self._map, 0, end)

    def started(self, job_id: int) -> None:
        with self._lock:
            self._started.add(job_id)
            self._append(b"S %d\n" % job_id)

    def ended(self, outcome: Outcome) -> None:
        line = _encode(outcome)
        with self._lock:
            self._started.discard(outcome.job_id)
            self._outcomes[outcome.job_id] = line
            self._append(line)

    def written(self, job_ids: Iterable[int]) -> None:
        ids = list(job_ids)
        if not ids:
            return
        with self._lock:
            for job_id in ids:
                self._outcomes.pop(job_id, None)
            # Nothing open (a drained worker's last write, before it exits): the journal is
            # emptied, so that its supervisor reads nothing, not every line since the last
            # rewrite (7 us of its CPU a job drained, measured).
            if self._end > self._capacity // 2 or not (self._started or self._outcomes):
                self._compact()
            else:
                self._append(b"W " + ",".join(map(str, ids)).encode() + b"\n")

    def close(self) -> None:
        self._map.close()


def read(path: Path) -> tuple[set[int], list[Outcome]]:
    """Replay a journal: (started and not finished, outcomes not written). An outcome line is
    decoded only if no later line says it was written."""
    started: set[int] = set()
    # By job: the line's kind and text, and whether the job was started before it.
    outcomes: dict[int, tuple[str, str, bool]] = {}
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return started, []
    if len(data) < _HEADER.size:
        return started, []
    (end,) = _HEADER.unpack_from(data, 0)
    text = data[_HEADER.size : min(end, len(data))].decode(errors="replace")
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        try:
            if kind == "S":
                started.add(int(rest))
            elif kind in ("C", "O"):
                # The job's id: a C line's first field, an O line's first list item.
                job_id = int(rest.partition(" ")[0] if kind == "C" else rest[1:].partition(",")[0])
                outcomes[job_id] = (kind, rest, job_id in started)
                started.discard(job_id)
            elif kind == "W":
                for written in rest.split(","):
                    outcomes.pop(int(written), None)
        except ValueError:
            logger.warning("Unreadable journal line in %s: %.200r", path, line)
    decoded = []
    for job_id, (kind, rest, was_started) in outcomes.items():
        try:
            decoded.append(_decode(kind, rest))
        except (ValueError, TypeError, KeyError):
            if was_started:  # as if the line were not there: it ran, its outcome is lost
                started.add(job_id)
            logger.warning("Unreadable journal line in %s: %.200r", path, f"{kind} {rest}")
    return started, decoded


def recover(
    db: Database, path: Path, worker_id: str, how: str, *, shutting_down: bool = False
) -> None:
    """Set right what the dead worker ``worker_id`` left (see the module docstring).

    ``shutting_down``: it died while run_jobs shut down (past its shutdown timeout, or killed
    by a second signal): the jobs it was running were interrupted, not crashed, and are handed
    back without spending an attempt (within ``PGQUEUE_MAX_INTERRUPTIONS``)."""
    from django_pgqueue.worker.performer import decide, failed

    started, outcomes = read(path)
    # What the dead worker committed asynchronously (its last outcomes), on disk before anything
    # here reads it: visible is not durable, and a job it finished must not come back after a
    # server crash, as running under a worker nobody recovers.
    operations.make_durable(db)
    if outcomes:
        written = operations.finish(db, worker_id, outcomes, delete_completed=False)
        logger.info(
            "Worker %s died (%s): wrote %d outcomes it had not written",
            worker_id,
            how,
            len(written),
        )
    in_hand = operations.locked_jobs(db, worker_id)
    crashed = [job for job in in_hand if job.id in started]
    if crashed and shutting_down:
        statuses = operations.interrupt(
            db,
            worker_id,
            crashed,
            f"Handed back: the worker process {worker_id} stopped ({how}) while run_jobs shut "
            "down, with the job running",
        )
        logger.warning(
            "Worker %s stopped (%s) while shutting down: %d running jobs handed back as "
            "interrupted (%s)",
            worker_id,
            how,
            len(crashed),
            ", ".join(f"#{job_id} {status}" for job_id, status in sorted(statuses.items())),
        )
        crashed = []
    for job in crashed:
        exc = WorkerCrashed(
            f"The worker process {worker_id} died ({how}) while running job "
            f"{job.name!r} #{job.id} (attempt {job.attempts} of {job.max_attempts})"
        )
        outcome = failed(
            job, exc, job.started_at or job.locked_at or job.created_at, worker_id, decide(job)
        )
        operations.finish(db, worker_id, [outcome], delete_completed=False)
        logger.warning(
            "Job %s #%d was running when worker %s died (%s): %s",
            job.name,
            job.id,
            worker_id,
            how,
            Attempt.RETRIED.value if outcome.outcome == Attempt.RETRIED else "now dead",
        )
    unstarted = [job for job in in_hand if job.id not in started]
    if unstarted:
        handed = operations.release(db, worker_id, unstarted)
        logger.info(
            "Handed %d jobs claimed by worker %s back to the queue (never started)",
            len(handed),
            worker_id,
        )
