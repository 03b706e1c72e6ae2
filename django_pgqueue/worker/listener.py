"""LISTEN for committed jobs and wake the worker loop.

The ``pgqueue_job`` INSERT trigger sends one ``NOTIFY pgqueue, '<queue>'`` per queue and
committed transaction; runtime control (``Job.cancel()`` of a running job) sends
``NOTIFY pgqueue_control``, a change of periodic schedules ``NOTIFY pgqueue_schedules``. The
listener runs in a thread of its own, on a connection of its own, and turns each relevant
notification into a wake-up event for the worker loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from django_pgqueue import operations
from django_pgqueue.operations import CONNECTION_ERRORS
from django_pgqueue.printable import get_logger
from django_pgqueue.sql import NOTIFY_CHANNEL, SCHEDULE_CHANNEL
from django_pgqueue.sql.control import CONTROL_CHANNEL
from django_pgqueue.worker.connection import Backoff, QueueConnection

logger = get_logger("django_pgqueue.worker")


class Listener(threading.Thread):
    def __init__(
        self,
        alias: str,
        worker_id: str,
        queues: Sequence[str] | None,
        wake: Callable[[], None],
        control: Callable[[str], None] | None = None,
        on_schedules: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name=f"pgqueue-listener-{worker_id}", daemon=True)
        self.worker_id = worker_id
        self.connection = QueueConnection(alias, f"pgqueue listener {worker_id}")
        self.queues = frozenset(queues) if queues else None
        self.wake = wake
        self.control = control
        self.on_schedules = on_schedules
        self.stopping = threading.Event()
        self.listening = threading.Event()

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        backoff = Backoff()
        while not self.stopping.is_set():
            try:
                self._listen()
            except CONNECTION_ERRORS as exc:
                self.listening.clear()
                logger.warning(
                    "Worker %s: listener lost its connection (%s); reconnecting",
                    self.worker_id,
                    exc,
                )
                self.connection.close()
                backoff.sleep(self.stopping)
            except Exception:
                self.listening.clear()
                logger.exception("Worker %s: listener failed; restarting it", self.worker_id)
                self.connection.close()
                backoff.sleep(self.stopping)
            else:
                backoff.succeeded()
        self.connection.close()

    def _listen(self) -> None:
        channels = [NOTIFY_CHANNEL]
        if self.control is not None:
            channels.append(CONTROL_CHANNEL)
        if self.on_schedules is not None:
            channels.append(SCHEDULE_CHANNEL)
        operations.listen(self.connection, channels)
        conn = self.connection.raw
        if self.on_schedules is not None:
            self.on_schedules()
        self.listening.set()
        # Notifications may have been missed while (re)connecting: look once.
        self.wake()
        if self.control is not None:
            self.control("reconnected")
        while not self.stopping.is_set():
            for notify in conn.notifies(timeout=1.0):
                if notify.channel == CONTROL_CHANNEL:
                    if self.control is not None:
                        self.control(notify.payload)
                elif notify.channel == SCHEDULE_CHANNEL:
                    if self.on_schedules is not None:
                        self.on_schedules()
                elif self.queues is None or notify.payload in self.queues:
                    self.wake()
