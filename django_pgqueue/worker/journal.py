"""What a supervised worker process started and finished, kept where its supervisor can read it.

A job can kill the process that runs it (``os._exit``, a segfault, the OOM killer). The
supervisor then reads the dead child's journal and sets things right on its own connection
(:func:`recover`):

* outcomes the child had not written yet are written (a job that completed is never run again);
* the jobs it had started and not finished are the ones that were running when it died: each is
  charged one failed attempt (``WorkerCrashed``), retried or dead after its own ``max_attempts``;
* jobs it had claimed but not started are handed back without spending an attempt.

The journal is an append-only file of lines, ``S <id>`` (started), ``O <json>`` (an outcome),
``W <id,...>`` (outcomes written), rewritten from memory when it grows. Each line is one
``os.write`` on an ``O_APPEND`` descriptor, so a line is either there whole or not at all after
the process dies (the page cache survives a process; only a machine crash loses it, and then
the stale-job recovery of the claim takes over).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from django_pgqueue import operations
from django_pgqueue.exceptions import WorkerCrashed
from django_pgqueue.operations import Database, Outcome

logger = logging.getLogger("django_pgqueue.worker")

#: Rewrite the file from memory once it is this big.
COMPACT_BYTES = 1024 * 1024

_TIMES = ("started_at", "finished_at", "run_after")


def _encode(outcome: Outcome) -> bytes:
    fields = asdict(outcome)
    fields.pop("exception", None)
    for name in _TIMES:
        if fields[name] is not None:
            fields[name] = fields[name].isoformat()
    return b"O " + json.dumps(fields, separators=(",", ":")).encode() + b"\n"


def _decode(data: str) -> Outcome:
    fields: dict[str, Any] = json.loads(data)
    for name in _TIMES:
        if fields[name] is not None:
            fields[name] = datetime.fromisoformat(fields[name])
    return Outcome(**fields)


class Journal:
    """The child's side: record starts, outcomes and writes (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o600)
        self._lock = threading.Lock()
        self._started: set[int] = set()
        self._outcomes: dict[int, bytes] = {}
        self._size = 0

    def _append(self, line: bytes) -> None:
        os.write(self._fd, line)
        self._size += len(line)

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
            if self._size < COMPACT_BYTES:
                self._append(b"W " + ",".join(map(str, ids)).encode() + b"\n")
                return
            # Compact: the file becomes what is still open, written in one go.
            state = b"".join(b"S %d\n" % i for i in self._started)
            state += b"".join(self._outcomes.values())
            os.ftruncate(self._fd, 0)
            self._size = 0
            if state:
                self._append(state)

    def close(self) -> None:
        os.close(self._fd)


def read(path: Path) -> tuple[set[int], list[Outcome]]:
    """Replay a journal: (started and not finished, outcomes not written)."""
    started: set[int] = set()
    outcomes: dict[int, Outcome] = {}
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return started, []
    for line in text.splitlines():
        kind, _, data = line.partition(" ")
        try:
            if kind == "S":
                started.add(int(data))
            elif kind == "O":
                outcome = _decode(data)
                started.discard(outcome.job_id)
                outcomes[outcome.job_id] = outcome
            elif kind == "W":
                for job_id in data.split(","):
                    outcomes.pop(int(job_id), None)
        except (ValueError, TypeError, KeyError):
            logger.warning("Unreadable journal line in %s: %.200r", path, line)
    return started, list(outcomes.values())


def recover(db: Database, path: Path, worker_id: str, how: str) -> None:
    """Set right what the dead worker ``worker_id`` left (see the module docstring)."""
    from django_pgqueue.worker.performer import decide, failed

    started, outcomes = read(path)
    if outcomes:
        written = operations.finish(db, worker_id, outcomes, delete_completed=False)
        logger.info(
            "Worker %s died (%s): wrote %d outcomes it had not written",
            worker_id,
            how,
            len(written),
        )
    held = operations.locked_jobs(db, worker_id)
    crashed = [job for job in held if job.pk in started]
    for job in crashed:
        exc = WorkerCrashed(
            f"The worker process {worker_id} died ({how}) while running job "
            f"{job.name!r} #{job.pk} (attempt {job.attempts} of {job.max_attempts})"
        )
        outcome = failed(
            job, exc, job.started_at or job.locked_at or job.created_at, worker_id, decide(job)
        )
        operations.finish(db, worker_id, [outcome], delete_completed=False)
        logger.warning(
            "Job %s #%d was running when worker %s died (%s): %s",
            job.name,
            job.pk,
            worker_id,
            how,
            "retried" if outcome.outcome == "retried" else "now dead",
        )
    unstarted = [job.pk for job in held if job.pk not in started]
    if unstarted:
        handed = operations.release(db, worker_id, unstarted)
        logger.info(
            "Handed %d jobs claimed by worker %s back to the queue (never started)",
            len(handed),
            worker_id,
        )
