"""The end of a worker's run: hand back unstarted jobs, wait for running ones, write every
outcome, and mark the worker stopped. :meth:`Worker.run <django_pgqueue.worker.loop.Worker.run>`
calls it once the loop has returned."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.operations import DATABASE_ERRORS
from django_pgqueue.printable import get_logger
from django_pgqueue.worker import writeback
from django_pgqueue.worker.connection import Backoff

if TYPE_CHECKING:
    from django_pgqueue.worker.loop import Worker

logger = get_logger("django_pgqueue.worker")


def shutdown(worker: Worker) -> None:
    """Hand back unstarted jobs, wait for running ones, write every outcome."""
    unstarted = worker._executors.take_unstarted()
    deadline = time.monotonic() + worker.shutdown_timeout
    backoff = Backoff()
    released = False
    while True:
        try:
            if worker._claimer.unsettled:  # the loop lost its connection: see Claimer.settle
                worker._claimer.settle(worker._held_ids())
            if unstarted and not released:
                handed = operations.release(worker._connection, worker.worker_id, unstarted)
                released = True
                worker.stats.released += len(handed)
                for job_id in unstarted:
                    worker._claimed.pop(job_id, None)
                if handed:
                    logger.info(
                        "Handed %d unstarted jobs back to the queue (worker %s)",
                        len(handed),
                        worker.worker_id,
                    )
            if worker._outcomes:
                writeback.flush(worker)
            if not worker._claimed:
                writeback.make_durable(worker)
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                logger.warning(
                    "Worker %s: shutdown timeout with %d jobs still running; they will be "
                    "reclaimed after the visibility timeout",
                    worker.worker_id,
                    len(worker._claimed),
                )
                break
            worker._drain_events(min(remaining, settings.HEARTBEAT_INTERVAL))
            if worker._claimed and time.monotonic() - deadline < 0:
                worker._heartbeat()
        except DATABASE_ERRORS as exc:
            logger.warning(
                "Worker %s: queue database error during shutdown (%s)", worker.worker_id, exc
            )
            writeback.connection_lost(worker)
            worker._claimer.unsettled = True
            worker._connection.close()
            if time.monotonic() >= deadline:
                break
            time.sleep(backoff.failed())
    try:
        writeback.make_durable(worker)  # after a timeout; else done above
        operations.stop_worker(worker._connection, worker.worker_id, worker.stats.finished)
    except DATABASE_ERRORS:
        logger.warning("Could not mark worker %s stopped", worker.worker_id)
