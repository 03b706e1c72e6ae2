"""The worker's cursor (``worker.connection.NativeCursor``): psycopg's placeholders converted
once per statement, whatever its length, with the results psycopg's own cursor gives."""

from __future__ import annotations

import psycopg
import pytest

from django_pgqueue.worker.connection import QueueConnection, native

pytestmark = pytest.mark.django_db(transaction=True)


def test_placeholders_become_numbered_parameters_once():
    assert native("SELECT %(a)s, %(b)s, %(a)s, '100%%'", "utf-8") == (
        b"SELECT $1, $2, $1, '100%'",
        ("a", "b"),
    )
    assert native("SELECT %s, %s", "utf-8") == (b"SELECT $1, $2", 2)
    assert native("SELECT %s", "utf-8") is native("SELECT %s", "utf-8")  # cached
    with pytest.raises(TypeError, match="mixes"):
        native("SELECT %s, %(a)s", "utf-8")


def test_the_worker_cursor_runs_long_statements_as_psycopg_does():
    connection = QueueConnection("default", "pgqueue cursor test")
    # Longer than psycopg's 4,096-byte cache of conversions, as the claim is.
    padding = " ".join(f"/* {i:04d} */" for i in range(600))
    statement = f"SELECT %(n)s::int + 1, %(s)s::text, %(n)s::int, '5%%' {padding}"
    assert len(statement) > 4096
    params = {"n": 41, "s": "x"}
    try:
        with connection.cursor() as cursor:
            for _ in range(3):  # prepared from the second execution (prepare_threshold 1)
                cursor.execute(statement, params)
                assert cursor.fetchall() == [(42, "x", 41, "5%")]
            cursor.execute("SELECT %s + %s", [1, 2])
            assert cursor.fetchone() == (3,)
            cursor.execute("SELECT '100%%'")  # no parameters: sent as it is, as psycopg does
            assert cursor.fetchone() == ("100%%",)
            with pytest.raises(TypeError, match="sequence"):
                cursor.execute("SELECT %s", {"a": 1})
            with pytest.raises(TypeError, match="mapping"):
                cursor.execute("SELECT %(a)s", [1])
            with pytest.raises(TypeError, match="takes 2 parameters, 1 given"):
                cursor.execute("SELECT %s, %s", [1])
        with psycopg.Cursor(connection.raw) as plain:
            plain.execute(statement, params)
            assert plain.fetchall() == [(42, "x", 41, "5%")]
    finally:
        connection.close()
