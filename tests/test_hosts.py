"""Workers on separate hosts (tests/hosts.py): each host a network namespace, its workers
reaching a private cluster over a veth link, the way workers on other machines reach the
database over the network.

* 4 hosts x 2 processes x 4 threads drain 100,000 jobs exactly once.
* One host's link is cut (packets dropped, not refused) for longer than the visibility timeout
  while its workers hold jobs: the others reclaim and finish them, nothing is lost, the cut
  host's late writes change nothing, and once the link is back its workers take jobs again,
  never restarted. The same through a real PgBouncer in transaction mode.

Each test prints its figures (``-s`` shows them); docs/testing-hosts.md says what they were.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hosts import Host, Hosts, hosts
from tests.pgbouncer import PgBouncer
from tests.private_cluster import ClusterQueue
from tests.testapp import jobs
from tests.utils import wait_until

pytestmark = pytest.mark.slow

HOSTS = 4
PROCESSES = 2
THREADS = 4
DRAIN_JOBS = 100_000
#: Short, so a cut host's jobs come back within seconds; heartbeats well inside it.
VISIBILITY_TIMEOUT = 3.0
HEARTBEAT_INTERVAL = 0.75
#: What a worker logs when an outcome of its own matched nothing (fenced: docs/storage.md S10).
DROPPED = re.compile(
    r"job #(\d+)'s outcome \w+ dropped; its lock expired and another worker owns it"
)
#: The cut tests' claims (``PGQUEUE_BATCH_SIZE``; the default is 1000, claims start at 100).
CUT_BATCH_SIZE = 16
#: What the test compares of each job the cut host held, before its return and after.
HELD_ROW = "id, status, attempts, locked_by, claim_token, locked_at, finished_at, errors, result"
LOCK_EXPIRED = "The worker stopped heartbeating; its lock expired."


@pytest.fixture(scope="module")
def four_hosts(netns_tools: tuple[str, str]) -> Iterator[Hosts]:
    with hosts(HOSTS) as made:
        yield made


@pytest.fixture
def queue(four_hosts: Hosts) -> Iterator[ClusterQueue]:
    """The hosts' queue, empty; every worker stopped afterwards."""
    assert four_hosts.cluster is not None
    queue = ClusterQueue(four_hosts.cluster)
    queue.reset()
    yield queue
    for host in four_hosts.hosts:
        if host.cut_now:
            four_hosts.restore(host)
    four_hosts.stop_workers(timeout=15)
    for host in four_hosts.hosts:
        host.procs.clear()


@pytest.fixture
def runs(four_hosts: Hosts) -> Path:
    """The file the ``host_run`` jobs record their runs in, one line each."""
    path = four_hosts.logdir / f"runs-{uuid.uuid4().hex}.txt"
    path.touch()
    return path


def read_runs(path: Path) -> list[tuple[int, int, str]]:
    """(job id, attempt, worker id) of every run, in the order they ended."""
    lines = path.read_text().splitlines()
    return [(int(i), int(a), w) for i, a, w in (line.split() for line in lines)]


def start_all(made: Hosts, only: list[Host] | None = None, **env: str) -> None:
    settings = {
        "PGQUEUE_RETENTION": "86400",
        "PGQUEUE_POLL_INTERVAL": "0.2",
        "PGQUEUE_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
        "PGQUEUE_HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL),
        **env,
    }
    for host in made.hosts if only is None else only:
        made.start_worker(
            host,
            "--processes",
            str(PROCESSES),
            "--threads",
            str(THREADS),
            "--worker-id",
            f"host{host.index}",
            "--no-schedules",
            env=made.env(host, **settings),
        )


def by_host(queue: ClusterQueue, where: str = "TRUE") -> Counter[str]:
    """Jobs per host (``hostN``) whose last claim was that host's (``locked_by``)."""
    rows = queue.query(
        f"SELECT split_part(locked_by, '.', 1), count(*) FROM pgqueue_job WHERE {where} GROUP BY 1"
    )
    return Counter(dict(rows))


def completed(queue: ClusterQueue) -> int:
    return int(queue.query("SELECT count(*) FROM pgqueue_job WHERE status = 'completed'")[0][0])


def test_four_hosts_drain_100000_jobs_exactly_once(
    four_hosts: Hosts, queue: ClusterQueue, runs: Path
):
    began = time.monotonic()
    ids = queue.enqueue_many(jobs.host_run, [(str(runs),)] * DRAIN_JOBS)
    enqueued = time.monotonic() - began
    start_all(four_hosts)
    try:
        wait_until(lambda: completed(queue) == DRAIN_JOBS, timeout=150, interval=0.25)
    except AssertionError:
        raise AssertionError(
            f"{queue.statuses()}\n" + "".join(four_hosts.output(h) for h in four_hosts.hosts)
        ) from None
    wall = time.monotonic() - began

    assert queue.statuses() == Counter(completed=DRAIN_JOBS)
    assert queue.query("SELECT min(attempts), max(attempts) FROM pgqueue_job") == [(1, 1)]
    assert queue.query("SELECT count(*) FROM pgqueue_job WHERE errors <> '[]'") == [(0,)]
    ran = read_runs(runs)
    assert sorted(job_id for job_id, _, _ in ran) == sorted(ids)  # every job ran, once
    assert {attempt for _, attempt, _ in ran} == {1}
    # Each run was the claim that completed the job: the same worker.
    completed_by = dict(queue.query("SELECT id, locked_by FROM pgqueue_job"))
    assert all(completed_by[job_id] == worker for job_id, _, worker in ran)
    hosts_done = by_host(queue)
    assert set(hosts_done) == {f"host{i}" for i in range(HOSTS)}, hosts_done

    [(seconds,)] = queue.query(
        "SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM pgqueue_job"
    )
    print(
        f"\ndrain: {DRAIN_JOBS} jobs, {HOSTS} hosts x {PROCESSES} processes x {THREADS} "
        f"threads: {DRAIN_JOBS / float(seconds):,.0f} jobs/s over {float(seconds):.1f} s "
        f"(first start to last finish); enqueue {enqueued:.1f} s; wall {wall:.1f} s; "
        f"per host {dict(sorted(hosts_done.items()))}"
    )


def cut_one_host(made: Hosts, queue: ClusterQueue, runs: Path, **env: str) -> None:
    """Host 0's link is cut while its workers hold jobs, past the visibility timeout."""
    victim = made.hosts[0]
    # Claims of 16 at most: what a cut host holds is bounded, the rest waits for the others.
    env.setdefault("PGQUEUE_BATCH_SIZE", str(CUT_BATCH_SIZE))
    # Host 0 starts first, and the others once it holds jobs: at the cut it holds a full hand
    # (running, and claimed ahead: up to a batch per process), whatever the others' start took.
    first = 600  # 15 s of work for host 0 alone: it still holds jobs once the others are up
    first_ids = queue.enqueue_many(jobs.host_run, [(str(runs), 0.2)] * first)
    start_all(made, [victim], **env)

    def held() -> list[int]:
        rows = queue.query(
            "SELECT id FROM pgqueue_job WHERE status = 'running' AND locked_by LIKE 'host0.%%'"
        )
        return [row[0] for row in rows] if len(rows) >= THREADS else []

    wait_until(held, timeout=60, interval=0.02)
    start_all(made, made.hosts[1:], **env)
    wait_until(
        lambda: queue.query("SELECT count(*) FROM pgqueue_worker")[0][0] == HOSTS * PROCESSES,
        timeout=60,
        interval=0.05,
    )
    wait_until(held, timeout=60, interval=0.02)
    made.cut(victim)
    cut_at = time.monotonic()
    assert not made.reaches(victim, timeout=1), "the cut link still carries packets"
    # What host 0 held at the cut (it may have claimed a few more in between).
    holding = [
        row[0]
        for row in queue.query(
            "SELECT id FROM pgqueue_job WHERE status = 'running' AND locked_by LIKE 'host0.%%'"
        )
    ]
    assert holding

    def reclaimed() -> bool:
        rows = queue.query(
            "SELECT count(*) FROM pgqueue_job WHERE id = ANY(%s) "
            "AND locked_by NOT LIKE 'host0.%%' AND attempts = 2",
            [holding],
        )
        return rows[0][0] == len(holding)

    try:
        wait_until(reclaimed, timeout=60, interval=0.05)
    except AssertionError:
        rows = queue.query(
            "SELECT id, status, locked_by, attempts FROM pgqueue_job WHERE id = ANY(%s)",
            [holding],
        )
        raise AssertionError(f"not reclaimed: {rows}") from None
    reclaim_seconds = time.monotonic() - cut_at
    # The others finish what host 0 held while host 0 is still cut off.
    wait_until(
        lambda: (
            queue.query(
                "SELECT count(*) FROM pgqueue_job WHERE id = ANY(%s) AND status = 'completed'",
                [holding],
            )[0][0]
            == len(holding)
        ),
        timeout=90,
        interval=0.1,
    )
    # Cut for twice the visibility timeout at least: well past it, whenever the last heartbeat.
    time.sleep(max(0.0, cut_at + 2 * VISIBILITY_TIMEOUT - time.monotonic()))
    cut_seconds = time.monotonic() - cut_at
    before = queue.query(
        f"SELECT {HELD_ROW} FROM pgqueue_job WHERE id = ANY(%s) ORDER BY id",
        [holding],
    )
    [(restored_at,)] = queue.query("SELECT now()")
    made.restore(victim)
    restored = time.monotonic()
    assert made.reaches(victim, timeout=5)

    def host0_back() -> bool:
        # Both of host 0's processes are seen again (their registration, a heartbeat's).
        rows = queue.query(
            "SELECT count(*) FROM pgqueue_worker WHERE worker_id LIKE 'host0.%%' "
            "AND last_seen_at > %s AND stopped_at IS NULL",
            [restored_at],
        )
        return rows[0][0] == PROCESSES

    try:
        wait_until(host0_back, timeout=60, interval=0.1)
    except AssertionError:
        raise AssertionError(
            f"{queue.query('SELECT * FROM pgqueue_worker ORDER BY 1')}\n{made.output(victim)}"
        ) from None
    back_seconds = time.monotonic() - restored

    # Back: host 0's workers were never restarted, and still run.
    assert all(proc.poll() is None for proc in victim.procs), made.output(victim)
    # The jobs it held ran to the end there too (a job's own effects are at least once):
    # their outcomes reach the database late, and must match nothing.
    late = {job_id for job_id, _, worker in read_runs(runs) if worker.startswith("host0.")}
    late &= set(holding)

    # Its late outcomes were written, and matched nothing: the worker says so for each.
    def fenced() -> set[int]:
        text = "".join(Path(p.log_path).read_text(errors="replace") for p in victim.procs)  # type: ignore[attr-defined]
        dropped = {int(i) for i in DROPPED.findall(text)}
        return dropped if dropped >= late else set()

    try:
        wait_until(fenced, timeout=60, interval=0.1)
    except AssertionError:
        raise AssertionError(f"late outcomes never written:\n{made.output(victim)}") from None
    # Long enough (about 5 s of work for the others) that host 0's next poll finds some: its
    # polls are the fleet's (every poll interval times the 8 workers, jittered), not its own.
    second = 240
    queue.enqueue_many(jobs.host_run, [(str(runs), 0.5)] * second)
    wait_until(lambda: completed(queue) == first + second, timeout=90, interval=0.1)
    rejoined = time.monotonic() - cut_at

    after = queue.query(
        f"SELECT {HELD_ROW} FROM pgqueue_job WHERE id = ANY(%s) ORDER BY id",
        [holding],
    )
    assert after == before  # host 0's late outcomes and heartbeats changed nothing
    assert queue.statuses() == Counter(completed=first + second)  # nothing lost
    for _, status, attempts, locked_by, _, _, _, errors, _ in after:
        assert status == "completed" and attempts == 2
        assert not locked_by.startswith("host0.")
        assert [e["traceback"] for e in errors] == [LOCK_EXPIRED]  # the history: one reclaim
    # No other job was reclaimed or run twice.
    assert queue.query(
        "SELECT count(*) FROM pgqueue_job WHERE attempts <> 1 AND NOT id = ANY(%s)", [holding]
    ) == [(0,)]
    ran = Counter(job_id for job_id, _, _ in read_runs(runs))
    assert set(ran) == set(first_ids) | set(queue_ids(queue))
    assert {job_id for job_id, count in ran.items() if count > 1} <= set(holding)
    # Host 0 took new jobs after the link came back, without a restart.
    newer = by_host(queue, f"id > {max(first_ids)}")
    assert newer[f"host{victim.index}"] > 0, (newer, made.output(victim))
    print(
        f"\ncut: host 0 held {len(holding)} jobs; all reclaimed by the others "
        f"{reclaim_seconds:.1f} s after the cut (visibility timeout {VISIBILITY_TIMEOUT} s, "
        f"heartbeat {HEARTBEAT_INTERVAL} s); cut for {cut_seconds:.1f} s; host 0 ran {len(late)} "
        f"of them itself while cut off (their outcomes written late, fenced); jobs after the "
        f"link came back per host {dict(sorted(newer.items()))}; host 0 seen again "
        f"{back_seconds:.1f} s after the link came back; {rejoined:.1f} s cut to done"
    )


def queue_ids(queue: ClusterQueue) -> list[int]:
    return [row[0] for row in queue.query("SELECT id FROM pgqueue_job")]


def test_a_host_cut_off_past_the_visibility_timeout(
    four_hosts: Hosts, queue: ClusterQueue, runs: Path
):
    cut_one_host(four_hosts, queue, runs)


def test_a_host_cut_off_through_pgbouncer(
    four_hosts: Hosts, queue: ClusterQueue, runs: Path, pgbouncer_binary: str
):
    assert four_hosts.cluster is not None
    server: dict[str, Any] = {
        "HOST": "127.0.0.1",
        "PORT": four_hosts.cluster.port,
        "USER": "postgres",
        "PASSWORD": "",
    }
    from scripts import pgdb

    server["USER"] = pgdb.PRIVATE_USER
    bouncer = PgBouncer(
        server,
        binary=pgbouncer_binary,
        pool_size=40,
        listen=",".join(host.address for host in four_hosts.hosts),
    )
    bouncer.start()
    try:
        cut_one_host(
            four_hosts,
            queue,
            runs,
            PGPORT=str(bouncer.port),
            PGQUEUE_LISTEN="0",
            PGQUEUE_PREPARED_STATEMENTS="0",
        )
    finally:
        four_hosts.stop_workers(timeout=15)
        bouncer.stop()


def test_a_cut_host_starts_no_job_whose_lock_has_expired(
    four_hosts: Hosts, queue: ClusterQueue, runs: Path
):
    """Host 0 (1 process, 2 threads, claims of 4) holds 2 running jobs of 3.5 s and 2 claimed
    ahead when its link is cut. When a thread is free again, 3.5 s on, the visibility timeout
    (3 s) has passed since its last heartbeat: the locks of the jobs it claimed ahead have
    expired, host 1 reclaims and runs them, and starting them runs them twice. Host 0 should
    not start them (they are the others' now)."""
    victim, other = four_hosts.hosts[0], four_hosts.hosts[1]
    duration = 3.5
    settings = {
        "PGQUEUE_RETENTION": "86400",
        "PGQUEUE_POLL_INTERVAL": "0.2",
        "PGQUEUE_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
        "PGQUEUE_HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL),
        "PGQUEUE_BATCH_SIZE": "4",
    }
    ids = queue.enqueue_many(jobs.host_run, [(str(runs), duration)] * 4)
    four_hosts.start_worker(
        victim,
        "--processes", "1", "--threads", "2", "--worker-id", "host0", "--no-schedules",
        env=four_hosts.env(victim, **settings),
    )  # fmt: skip

    def holds_all() -> bool:
        rows = queue.query(
            "SELECT count(*) FROM pgqueue_job WHERE status = 'running' AND locked_by = 'host0'"
        )
        return rows[0][0] == len(ids)

    wait_until(holds_all, timeout=60, interval=0.02)
    four_hosts.cut(victim)
    cut_at = time.monotonic()
    four_hosts.start_worker(
        other,
        "--processes", "1", "--threads", "4", "--worker-id", "host1", "--no-schedules",
        env=four_hosts.env(other, **settings),
    )  # fmt: skip
    wait_until(lambda: queue.statuses() == Counter(completed=len(ids)), timeout=60)

    def host0_runs() -> list[int]:
        return [job_id for job_id, _, worker in read_runs(runs) if worker == "host0"]

    # Host 0's threads are free again after one job's duration: time for them to start more.
    with contextlib.suppress(AssertionError):
        wait_until(
            lambda: len(host0_runs()) > 2 or time.monotonic() > cut_at + 2 * duration + 1,
            timeout=30,
        )
    during_cut = host0_runs()
    four_hosts.restore(victim)
    host1 = [job_id for job_id, _, worker in read_runs(runs) if worker == "host1"]
    print(f"\nwhile host 0 was cut off, it ran {sorted(during_cut)}, host 1 {sorted(host1)}")
    assert len(during_cut) <= 2  # the two it was running at the cut, no more
