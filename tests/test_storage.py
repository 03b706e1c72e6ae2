"""The job table's storage parameters (``0010_job_serial_scans``): a report scanning the job
table runs in one process, whatever the planner's costs would choose. Plans only, never
timings."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_pgqueue.sql import TABLE
from tests.testapp import jobs
from tests.utils import migrated_back_to, plan_nodes

pytestmark = pytest.mark.django_db(transaction=True)

#: The readers of ``pgqueue_bench --scenario active-readers``.
REPORT = "SELECT count(*), max(created_at), sum(attempts) FROM {table}"
#: Costs that make the planner choose a parallel scan of any table that allows one.
PARALLEL_COSTS = {
    "parallel_setup_cost": "0",
    "parallel_tuple_cost": "0",
    "min_parallel_table_scan_size": "0",
    "max_parallel_workers_per_gather": "2",
}


def report_plan(table: str, *, analyze: bool = False) -> list[str]:
    """The node types of the report's plan on ``table``, in a REPEATABLE READ transaction
    whose costs favour parallel scans."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for name, value in PARALLEL_COSTS.items():
            cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
        options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
        cursor.execute(f"EXPLAIN ({options}) " + REPORT.format(table=table))
        (document,) = cursor.fetchone()
    return [node["Node Type"] for node in plan_nodes(document[0]["Plan"])]


@pytest.fixture
def some_jobs() -> None:
    jobs.noop.enqueue_many([()] * 2000)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {TABLE}")


def test_a_report_on_the_job_table_scans_it_in_one_process(some_jobs):
    assert report_plan(TABLE, analyze=True) == ["Aggregate", "Seq Scan"]
    # The same rows in a table of their own: these costs do make the scan parallel.
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE control_report AS SELECT * FROM {TABLE}")
        cursor.execute("ANALYZE control_report")
    try:
        assert "Gather" in report_plan("control_report")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE control_report")


def test_going_back_gives_the_planner_its_choice_again(some_jobs):
    with migrated_back_to("0009"):
        assert "Gather" in report_plan(TABLE)
    assert "Gather" not in report_plan(TABLE)
