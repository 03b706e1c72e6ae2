"""What puts the queue under MVCC pressure: connections that pin the xmin horizon.

* :class:`IdleInTransaction`: ``BEGIN; SELECT txid_current();`` then nothing, the way a
  forgotten ``psql`` or a stuck ORM transaction holds the horizon (an XID assigned).
* :class:`RepeatableReadReaders`: connections that scan the job table in a loop inside
  ``REPEATABLE READ`` transactions, the shape of an analytics reader; each transaction lasts
  ``transaction_seconds``, and the readers are staggered so one of them always holds an old
  snapshot. Between scans each pauses ``pause`` seconds: 0.1 by default, as the readers of the
  hardbyte/postgresql-job-queue-benchmarking harness do (``time.sleep(0.1)``).

Each runs on its own connection in a thread of the benchmark, and :meth:`stop` ends it (the
transaction rolled back).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import psycopg
from django.db import connections

from django_pgqueue import sql
from django_pgqueue.conf import settings

#: A reader's pause between two scans (s): the benchmarking harness's.
READER_PAUSE = 0.1


def open_connection(application_name: str) -> psycopg.Connection[Any]:
    """A plain autocommit psycopg connection to the queue database, named for pg_stat_activity."""
    wrapper = connections.create_connection(settings.DATABASE)
    wrapper.settings_dict = {
        **wrapper.settings_dict,
        "OPTIONS": {
            **{k: v for k, v in wrapper.settings_dict.get("OPTIONS", {}).items() if k != "pool"},
            "application_name": application_name[:63],
        },
    }
    wrapper.ensure_connection()
    connection: psycopg.Connection[Any] = wrapper.connection
    connection.autocommit = True
    return connection


class Pressure:
    """A background load on the database that :meth:`start` begins and :meth:`stop` ends."""

    name = "none"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"pressure": self.name}


class IdleInTransaction(Pressure):
    """One connection idle in a transaction that holds an XID."""

    name = "idle-in-tx"

    def __init__(self, application_name: str) -> None:
        self.application_name = application_name
        self.connection: psycopg.Connection[Any] | None = None
        self.xid: int | None = None

    def start(self) -> None:
        self.connection = open_connection(self.application_name)
        self.connection.execute("BEGIN")
        row = self.connection.execute("SELECT txid_current()").fetchone()
        self.xid = int(row[0]) if row else None

    def stop(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(psycopg.Error):
                self.connection.execute("ROLLBACK")
            self.connection.close()
            self.connection = None

    def describe(self) -> dict[str, Any]:
        return {"pressure": self.name, "holder_xid": self.xid}


class RepeatableReadReaders(Pressure):
    """``count`` connections scanning the job table in ``REPEATABLE READ`` transactions."""

    name = "active-readers"

    def __init__(
        self,
        application_name: str,
        count: int = 4,
        transaction_seconds: float = 30.0,
        pause: float = READER_PAUSE,
    ) -> None:
        self.application_name = application_name
        self.count = count
        self.transaction_seconds = transaction_seconds
        self.pause = pause
        self.scans = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        self._stop.clear()
        for index in range(self.count):
            # Staggered: reader i starts its first transaction i/count of a period late.
            delay = self.transaction_seconds * index / self.count
            thread = threading.Thread(
                target=self._read, args=(index, delay), name=f"reader-{index}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _read(self, index: int, delay: float) -> None:
        try:
            connection = open_connection(f"{self.application_name}:{index}")
        except psycopg.Error as exc:
            self.errors.append(str(exc))
            return
        try:
            if self._stop.wait(delay):
                return
            while not self._stop.is_set():
                connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                ends = time.monotonic() + self.transaction_seconds
                while not self._stop.is_set() and time.monotonic() < ends:
                    connection.execute(
                        f"SELECT count(*), max(created_at), sum(attempts) FROM {sql.TABLE}"
                    ).fetchone()
                    with self._lock:
                        self.scans += 1
                    self._stop.wait(self.pause)
                connection.execute("COMMIT")
        except psycopg.Error as exc:
            self.errors.append(str(exc))
        finally:
            with contextlib.suppress(psycopg.Error):
                connection.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        self._threads.clear()

    def describe(self) -> dict[str, Any]:
        return {
            "pressure": self.name,
            "readers": self.count,
            "reader_transaction_s": self.transaction_seconds,
            "reader_pause_s": self.pause,
            "reader_scans": self.scans,
            "reader_errors": self.errors[:3],
        }
