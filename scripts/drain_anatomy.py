"""Where a drain's time goes: a real ``run_jobs --burst`` over no-op jobs, taken apart.

    DATABASE_URL=postgres://... python scripts/drain_anatomy.py --jobs 100000 --processes 2

Prints, for the drain of ``--jobs`` no-op jobs by ``--processes`` worker processes (one thread
each) in a scratch queue (deleted afterwards):

* the worker's CPU per job, its loop thread (claims, outcome writes) apart from its other
  threads (the executor that runs the jobs), read from ``/proc`` while it runs;
* its database backends' CPU per job (``/proc``: the server must run on this machine);
* each statement's calls, rows per call and execution time per job, from
  ``pg_stat_statements`` when the server loads it (deltas over the drain);
* what the backends were doing, sampled from ``pg_stat_activity`` every 5 ms: running, idle
  (waiting for the worker) or waiting on a lock, I/O or the WAL;
* the idle gaps of each worker between one job's end and the next one's start, and the sizes
  of the claims, from the jobs' own rows (``started_at``, ``finished_at``, ``claim_token``).

docs/performance.md ("Where a drain's time goes") shows its output and what it led to.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--settings", default="tests.settings")
    parser.add_argument("--json", action="store_true", help="one JSON object instead")
    options = parser.parse_args()
    if options.jobs < 1 or options.processes < 1:
        parser.error("--jobs and --processes must be at least 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", options.settings)
    import django

    django.setup()
    result = anatomy(options.jobs, options.processes)
    if options.json:
        print(json.dumps(result))
    else:
        print_table(result)


def anatomy(jobs: int, processes: int) -> dict[str, Any]:
    from django.db import connection

    from django_pgqueue.contrib.bench import database, workload
    from django_pgqueue.contrib.bench.measurement import BackendCPU
    from django_pgqueue.contrib.bench.results import new_queue_name
    from django_pgqueue.contrib.bench.workers import WorkerProcess

    bench_jobs = workload.register()
    queue = new_queue_name()
    mark = database.max_job_id()
    worker_id = f"{queue}:anatomy"
    bench_jobs.noop.using(queue=queue).enqueue_many([()] * jobs)
    database.vacuum_analyze()
    statements = _statements()
    backends = BackendCPU(f"pgqueue worker {worker_id}")
    waits: collections.Counter[str] = collections.Counter()
    threads: dict[tuple[int, int], float] = {}  # (process, thread) -> CPU seconds
    child = WorkerProcess(
        queues=[queue], processes=processes, threads=1, burst=True, worker_id=worker_id
    )
    started = time.perf_counter()
    child.start()
    try:
        with connection.cursor() as cursor:
            while child.poll() is None:
                backends.sample()
                _thread_cpu(child.pid, threads)
                cursor.execute(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE application_name LIKE %s",
                    [f"pgqueue worker {worker_id}%"],
                )
                for state, kind, event in cursor.fetchall():
                    waits[_activity(state, kind, event)] += 1
                time.sleep(0.005)
        wall = time.perf_counter() - started
        if child.exit_code != 0:
            raise SystemExit(f"run_jobs --burst exited with status {child.exit_code}")
        rows = _job_rows(queue, mark)
        statements = _statements(statements)
    finally:
        child.stop()
        database.delete_queue(queue, mark)
        database.delete_worker_rows(queue)
    return _summary(jobs, processes, wall, threads, backends.total, statements, waits, rows)


def _thread_cpu(supervisor: int | None, threads: dict[tuple[int, int], float]) -> None:
    """CPU seconds so far of every thread of the supervisor's worker processes."""
    if supervisor is None:
        return
    tick = os.sysconf("SC_CLK_TCK")
    try:
        children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    except OSError:
        return
    for pid in map(int, children):
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            threads[(pid, int(task.name))] = (int(fields[11]) + int(fields[12])) / tick


def _activity(state: str | None, kind: str | None, event: str | None) -> str:
    if state == "active" and kind is None:
        return "running a statement"
    if kind == "Client" and event == "ClientRead":
        return "idle: waiting for the worker"
    if kind is None:
        return f"{state}"
    return f"waiting: {kind}/{event}"


def _statements(before: dict[str, tuple[int, float, int]] | None = None) -> dict[str, Any]:
    """pg_stat_statements' calls, execution ms and rows per statement (the delta since
    ``before``); empty when the server does not load it."""
    from django.db import DatabaseError, connection, transaction

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 70), calls, "
                "total_exec_time, rows FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            now = {}
            for query, calls, ms, rows in cursor.fetchall():
                old = now.get(query, (0, 0.0, 0))
                now[query] = (old[0] + calls, old[1] + ms, old[2] + rows)
    except DatabaseError:
        return {}
    if before is None:
        return now
    delta = {}
    for query, (calls, ms, rows) in now.items():
        calls_before, ms_before, rows_before = before.get(query, (0, 0.0, 0))
        if calls > calls_before:
            delta[query] = (calls - calls_before, ms - ms_before, rows - rows_before)
    return delta


def _job_rows(queue: str, mark: int) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT locked_by, started_at, finished_at, claim_token FROM pgqueue_job "
            "WHERE id > %s AND queue = %s ORDER BY locked_by, started_at",
            [mark, queue],
        )
        return cursor.fetchall()


def _summary(
    jobs: int,
    processes: int,
    wall: float,
    threads: dict[tuple[int, int], float],
    backend_seconds: float | None,
    statements: dict[str, Any],
    waits: collections.Counter[str],
    rows: list[tuple[Any, ...]],
) -> dict[str, Any]:
    per_job = 1e6 / jobs
    loop = sum(s for (pid, tid), s in threads.items() if pid == tid)
    others = sum(s for (pid, tid), s in threads.items() if pid != tid)
    claims = collections.Counter(token for *_, token in rows)
    gaps: list[float] = []
    busy = 0.0
    previous: tuple[Any, ...] | None = None
    for row in rows:
        worker, start, end, _ = row
        busy += (end - start).total_seconds()
        if previous is not None and previous[0] == worker:
            gaps.append(max((start - previous[2]).total_seconds(), 0.0))
        previous = row
    sizes = sorted(claims.values())
    samples = sum(waits.values()) or 1
    return {
        "jobs": jobs,
        "processes": processes,
        "wall_s": round(wall, 3),
        "jobs_per_s": round(jobs / wall),
        "worker_loop_cpu_us_per_job": round(loop * per_job, 1),
        "worker_other_threads_cpu_us_per_job": round(others * per_job, 1),
        "postgres_cpu_us_per_job": None
        if backend_seconds is None
        else round(backend_seconds * per_job, 1),
        "statements": [
            {
                "query": query,
                "calls": calls,
                "rows_per_call": round(rows_ / calls, 1),
                "exec_us_per_job": round(ms * 1000 / jobs, 1),
            }
            for query, (calls, ms, rows_) in sorted(
                statements.items(), key=lambda item: -item[1][1]
            )[:8]
        ],
        "backend_activity": {
            what: round(count / samples, 3) for what, count in waits.most_common()
        },
        "claims": len(sizes),
        "claimed_jobs": sum(sizes),
        "claim_size_median": statistics.median(sizes) if sizes else 0,
        "claim_size_max": sizes[-1] if sizes else 0,
        "job_running_share": round(busy / (wall * processes), 3),
        "gap_between_jobs_us_median": round(statistics.median(gaps) * 1e6, 1) if gaps else None,
        "gap_between_jobs_us_p99": round(statistics.quantiles(gaps, n=100)[98] * 1e6, 1)
        if len(gaps) >= 100
        else None,
        "gaps_over_1ms": sum(1 for gap in gaps if gap > 0.001),
        "gaps_over_1ms_share_of_time": round(
            sum(gap for gap in gaps if gap > 0.001) / (wall * processes), 3
        ),
    }


def print_table(result: dict[str, Any]) -> None:
    print(
        f"{result['jobs']:,} no-op jobs, {result['processes']} processes x 1 thread: "
        f"{result['wall_s']} s, {result['jobs_per_s']:,} jobs/s (from the fork)"
    )
    print("| where | per job |\n| --- | --- |")
    print(f"| worker loop thread CPU | {result['worker_loop_cpu_us_per_job']} us |")
    print(f"| worker executor threads CPU | {result['worker_other_threads_cpu_us_per_job']} us |")
    print(f"| PostgreSQL backends CPU | {result['postgres_cpu_us_per_job']} us |")
    for statement in result["statements"]:
        print(
            f"| `{statement['query']}` ({statement['calls']} calls, "
            f"{statement['rows_per_call']} rows each) | {statement['exec_us_per_job']} us |"
        )
    print("\nbackends' activity (sampled):")
    for what, share in result["backend_activity"].items():
        print(f"  {share:6.1%}  {what}")
    print(
        f"\nclaims: {result['claims']}, median {result['claim_size_median']} jobs, "
        f"largest {result['claim_size_max']}"
    )
    print(
        f"jobs running {result['job_running_share']:.1%} of the workers' time; gaps between "
        f"a worker's jobs: median {result['gap_between_jobs_us_median']} us, p99 "
        f"{result['gap_between_jobs_us_p99']} us, {result['gaps_over_1ms']} over 1 ms "
        f"({result['gaps_over_1ms_share_of_time']:.1%} of the time)"
    )


if __name__ == "__main__":
    main()
