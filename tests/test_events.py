"""The loop's wait (``worker.events``): an event put by another thread, or a NOTIFY on a real
listening connection, ends it; the events stay queued for the loop to take."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection

from django_pgqueue.worker.events import Events

pytestmark = pytest.mark.django_db(transaction=True)

#: Far longer than any of these waits takes: a wait that ran to it did not see what it should.
LONG = 120.0


@pytest.fixture
def listening():
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    conn = psycopg.connect(**params, autocommit=True)
    conn.execute("LISTEN pgqueue_events_test")
    yield conn
    conn.close()


def timed_wait(events: Events, fd: int) -> float:
    started = time.monotonic()
    events.wait(LONG, fd)
    return time.monotonic() - started


def assert_ended_by(events: Events, fd: int, action, *args) -> None:
    """``action(*args)`` in another thread a moment into a wait on ``fd``: it ends the wait."""
    doer = threading.Timer(0.2, action, args)
    doer.start()
    try:
        assert timed_wait(events, fd) < LONG / 2
    finally:
        doer.join()


def test_an_event_from_another_thread_ends_the_wait_on_a_socket(listening):
    events = Events()
    assert_ended_by(events, listening.pgconn.socket, events.put, "outcome")
    events.close()
    assert events.get_nowait() == "outcome"


def test_a_notify_ends_the_wait_and_an_event_queued_before_never_waits(listening):
    events = Events()
    with psycopg.connect(listening.info.dsn, autocommit=True) as other:
        statement = "NOTIFY pgqueue_events_test, 'x'"
        assert_ended_by(events, listening.pgconn.socket, other.execute, statement)
    listening.pgconn.consume_input()
    notify = listening.pgconn.notifies()
    assert notify is not None and notify.extra == b"x"
    # Queued before the wait (the loop had not taken it yet): the wait returns at once.
    events.put("stop")
    assert timed_wait(events, listening.pgconn.socket) < LONG / 2
    assert events.get_nowait() == "stop"
    events.close()
    events.put("after close")  # goes to the queue only
    assert events.get_nowait() == "after close"
