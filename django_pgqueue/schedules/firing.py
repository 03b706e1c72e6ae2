"""The worker's side of schedules: fire due ticks, and know when to look again.

The worker runs :meth:`ScheduleFirer.fire` on its connection as a housekeeping task, again
after :meth:`~ScheduleFirer.wait` (until the next tick, or ``PGQUEUE_POLL_INTERVAL`` at the
latest: no busy polling), and at once when schedules change (its listener hears the table
trigger's ``NOTIFY pgqueue_schedules``). The first firing syncs the code's declarations. Errors
of its own never stop the worker's claims. The firer knows nothing of the worker: it is given
the connection to fire on, and says how many jobs it enqueued.
"""

from __future__ import annotations

import time

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.operations import CONNECTION_ERRORS, Database
from django_pgqueue.printable import get_logger

logger = get_logger("django_pgqueue.worker")

#: How soon to look again at schedules that are due but locked by another worker's firing.
LOCKED_RECHECK = 0.2
#: Longest wait after an error that is not the connection's (a missing table before migrate).
ERROR_DELAY_MAX = 60.0


class ScheduleFirer:
    """Fires one worker's due schedule ticks."""

    def __init__(self, worker_id: str, alias: str) -> None:
        self.worker_id = worker_id
        self.alias = alias  # the database the code's declarations are synced to
        #: When (``time.monotonic()``) to fire next; 0: at once.
        self.due_at = 0.0
        self.synced = False
        self._error_delay = 0.0

    def wait(self) -> float:
        """Seconds until the next firing is due."""
        return max(0.0, self.due_at - time.monotonic())

    def fire(self, db: Database) -> int:
        """Sync (the first time), fire due ticks; returns the jobs enqueued."""
        try:
            if not self.synced:
                self._sync()
            fired = operations.fire_schedules(db)
        except CONNECTION_ERRORS:
            raise  # the loop reconnects
        except Exception as exc:
            self._error_delay = min(ERROR_DELAY_MAX, max(1.0, self._error_delay * 2))
            logger.warning(
                "Worker %s could not fire schedules (%s: %s); trying again in %.0fs",
                self.worker_id,
                type(exc).__name__,
                str(exc).strip() or "-",
                self._error_delay,
                exc_info=not isinstance(exc, operations.DATABASE_ERRORS),
            )
            self.due_at = time.monotonic() + self._error_delay
            return 0
        self._error_delay = 0.0
        now = time.monotonic()
        look_again = now + settings.POLL_INTERVAL
        if fired.next_due is None:
            self.due_at = look_again
        else:
            wait = (fired.next_due - fired.now).total_seconds()
            if wait <= 0:  # due, but another worker has it locked (or more than a batch were due)
                wait = 0.0 if fired.schedules >= operations.FIRE_BATCH else LOCKED_RECHECK
            self.due_at = min(look_again, now + wait)
        return fired.enqueued

    def _sync(self) -> None:
        from django_pgqueue.schedules.sync import sync
        from django_pgqueue.worker.connection import own_django_connection

        # The sync runs on the ORM, on a connection of its own for the moment: never one of the
        # job threads' pool (docs/worker.md, "Connections"), closed at the end.
        try:
            with own_django_connection(self.alias, f"pgqueue schedules {self.worker_id}"):
                sync(self.alias)
        except CONNECTION_ERRORS:
            raise  # synced at the next try
        except Exception:
            # Firing goes on with the rows as they are (``migrate`` syncs too).
            logger.exception("Worker %s could not sync the code's schedules", self.worker_id)
        self.synced = True
