"""Every operation on the queue's tables, in one place: the only code that runs queue SQL.

The worker (scheduling and capacity only), the manager and QuerySet, the admin, the dashboard,
the ``django.tasks`` backend, the benchmark and the tests all call these functions, so what the
tests exercise is what production runs.

=================  ===================================================================
module             owns
=================  ===================================================================
``db``             the :class:`Database` an operation runs on; the error classes
``enqueue``        :func:`insert`, :func:`insert_many` (INSERT or COPY), :func:`wake_after_commit`,
                   :func:`listen`
``claim``          :func:`claim` (SKIP LOCKED, stale-job recovery), decoding rows
``outcomes``       :func:`heartbeat`, :func:`finish`, :func:`make_durable`, :func:`release`,
                   :func:`release_unknown`, :func:`next_run_after`, :func:`cancel_requested`,
                   :func:`save_progress`
``integrity``      the storage's invariants: :func:`violations`, :func:`repair`
``maintenance``    :func:`prune` (jobs and worker rows), the worker table
``ready``          the ready ring: :func:`promote` due jobs, :func:`recycle` drained slots,
                   :func:`sweep_parked` (rows of paused queues), :func:`sweep_held` (a busy
                   key's or a limited queue's backlog), :class:`StaleScan` (where a
                   worker's stale-job scan starts)
``control``        :func:`retry`, :func:`cancel` (pending: at once; running: asked to stop),
                   :func:`run_now` on a QuerySet's jobs
``testing``        :func:`make_due` for :func:`django_pgqueue.testing.run_jobs`
``schedules``      :func:`fire_schedules` (due ticks, exactly once), :func:`run_schedule_now`
``rota``           :func:`peers` (the live workers, listening or not), :func:`pass_wake`,
                   :func:`mark_listening`
``queues``         :func:`set_paused`, :func:`set_limits`, :func:`queue_controls`
``stats``          the dashboard's counts and estimates (``operations.stats.*``)
``search``         the admin search's conditions the ORM cannot spell
=================  ===================================================================
"""

from __future__ import annotations

from django_pgqueue.operations.claim import (
    CLAIM_RACE_RETRIES,
    ClaimPath,
    ClaimRequest,
    claim,
    jobs_from_rows,
    limited_claim_needed,
    locked_jobs,
)
from django_pgqueue.operations.control import RETRYABLE_Q, cancel, retry, run_now, scheduled_q
from django_pgqueue.operations.db import (
    CONNECTION_ERRORS,
    DATABASE_ERRORS,
    Database,
    DjangoDatabase,
)
from django_pgqueue.operations.enqueue import (
    BULK_BATCH_SIZE,
    FEW_MAX,
    insert,
    insert_many,
    listen,
    unlisten,
    wake_after_commit,
)
from django_pgqueue.operations.flow import (
    batch_counts,
    batch_of,
    check_parents,
    create_batch,
    dependents,
    insert_edges,
    parent_results,
    parents,
    seal_batch,
)
from django_pgqueue.operations.integrity import (
    Repaired,
    RepairRounds,
    Violation,
    repair,
    repair_workflows,
    storage_ready,
    violations,
)
from django_pgqueue.operations.maintenance import (
    WORKER_ROW_RETENTION,
    Pruned,
    prune,
    report_worker,
    stop_worker,
)
from django_pgqueue.operations.outcomes import (
    NextRun,
    Outcome,
    cancel_requested,
    finish,
    heartbeat,
    interrupt,
    make_durable,
    next_run_after,
    release,
    release_unknown,
    save_progress,
)
from django_pgqueue.operations.queues import (
    QUEUES_CHANGED,
    QueueControl,
    queue_controls,
    set_limits,
    set_paused,
)
from django_pgqueue.operations.ready import (
    StaleScan,
    promote,
    recycle,
    slot_counts,
    sweep_held,
    sweep_parked,
)
from django_pgqueue.operations.rota import Peer, mark_listening, pass_wake, peers
from django_pgqueue.operations.schedules import (
    FIRE_BATCH,
    Fired,
    fire_schedules,
    lock_schedule_sync,
    run_schedule_now,
)
from django_pgqueue.operations.testing import make_due, settle_edges

__all__ = [
    "BULK_BATCH_SIZE",
    "CLAIM_RACE_RETRIES",
    "CONNECTION_ERRORS",
    "DATABASE_ERRORS",
    "FEW_MAX",
    "FIRE_BATCH",
    "QUEUES_CHANGED",
    "RETRYABLE_Q",
    "WORKER_ROW_RETENTION",
    "ClaimPath",
    "ClaimRequest",
    "Database",
    "DjangoDatabase",
    "Fired",
    "NextRun",
    "Outcome",
    "Peer",
    "Pruned",
    "QueueControl",
    "RepairRounds",
    "Repaired",
    "StaleScan",
    "Violation",
    "batch_counts",
    "batch_of",
    "cancel",
    "cancel_requested",
    "check_parents",
    "claim",
    "create_batch",
    "dependents",
    "finish",
    "fire_schedules",
    "heartbeat",
    "insert",
    "insert_edges",
    "insert_many",
    "interrupt",
    "jobs_from_rows",
    "limited_claim_needed",
    "listen",
    "lock_schedule_sync",
    "locked_jobs",
    "make_due",
    "make_durable",
    "mark_listening",
    "next_run_after",
    "parent_results",
    "parents",
    "pass_wake",
    "peers",
    "promote",
    "prune",
    "queue_controls",
    "recycle",
    "release",
    "release_unknown",
    "repair",
    "repair_workflows",
    "report_worker",
    "retry",
    "run_now",
    "run_schedule_now",
    "save_progress",
    "scheduled_q",
    "seal_batch",
    "set_limits",
    "set_paused",
    "settle_edges",
    "slot_counts",
    "stop_worker",
    "storage_ready",
    "sweep_held",
    "sweep_parked",
    "unlisten",
    "violations",
    "wake_after_commit",
]
