"""A reading of the wake rota (``sql.rota.PEERS``) and check W111 test each worker row once
against the live listeners, whatever the planner estimates. Plans only, never timings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from django_pgqueue.sql import WORKER_TABLE
from django_pgqueue.sql.integrity import _DEAF_LISTENERS
from django_pgqueue.sql.rota import PEERS, listener_name
from tests.utils import plan_nodes

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = 20


@pytest.fixture
def listening_fleet() -> Iterator[list[str]]:
    """``WORKERS`` live worker rows marked listening, each with its listening connection open."""
    ids = [f"plan-rota-{n}" for n in range(WORKERS)]
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    listeners = [psycopg.connect(**{**params, "application_name": listener_name(i)}) for i in ids]
    try:
        with connection.cursor() as cursor:
            for worker_id in ids:
                cursor.execute(
                    f"INSERT INTO {WORKER_TABLE} (worker_id, hostname, pid, queues, threads, "
                    "started_at, last_seen_at, jobs_done, listening) "
                    "VALUES (%s, 'h', 1, '[]', 1, now(), now(), 0, true)",
                    [worker_id],
                )
        yield ids
    finally:
        for listener in listeners:
            listener.close()


def md5_tests(statement: str, params: dict[str, Any] | None = None) -> list[int]:
    """How many times each node that compares worker tags with listener names evaluated its
    comparison, the planner held to nested loops (as when it estimates one row a side)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_hashjoin = off")
        cursor.execute("SET LOCAL enable_mergejoin = off")
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params)
        (explained,) = cursor.fetchone()
        transaction.set_rollback(True)
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    return [
        (node["Actual Rows"] + node.get("Rows Removed by Join Filter", 0)) * node["Actual Loops"]
        for node in plan_nodes(plan)
        if "md5" in node.get("Join Filter", "")
    ]


def test_a_reading_of_the_rota_tests_each_worker_once(listening_fleet: list[str]) -> None:
    assert all(n <= WORKERS for n in md5_tests(PEERS, {"alive": 60})), md5_tests(
        PEERS, {"alive": 60}
    )
    with connection.cursor() as cursor:
        cursor.execute(PEERS, {"alive": 60})
        listening = {row[0]: row[2] for row in cursor.fetchall()}
    assert all(listening[worker_id] for worker_id in listening_fleet)


def test_the_deaf_listeners_check_tests_each_worker_once(listening_fleet: list[str]) -> None:
    assert all(n <= WORKERS for n in md5_tests(_DEAF_LISTENERS)), md5_tests(_DEAF_LISTENERS)
    with connection.cursor() as cursor:
        cursor.execute(_DEAF_LISTENERS)
        assert not {row[0] for row in cursor.fetchall()} & set(listening_fleet)
