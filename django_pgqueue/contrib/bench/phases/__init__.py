"""The phases of a benchmark run, in the order they run: the registry ``--phases`` reads.

A phase is a function taking the run's :class:`.context.BenchContext` (its options, its
scratch queue, ``start_worker``, the result to fill); it leaves the scratch queue empty. A new
phase is a module here and one line below.

* ``enqueue``: ``enqueue_many`` of ``jobs`` no-op jobs -> ``enqueue_bulk_per_s``.
* ``drain``: those jobs, drained by ``run_jobs --burst --processes P`` -> ``drain_per_s``,
  from the fork to the latest ``finished_at``.
* ``single``: ``enqueue()`` one job per transaction -> ``enqueue_single_ms_p50/p99``.
* ``pickup``: an idle ``run_jobs`` worker (LISTEN/NOTIFY on), one job enqueued at a time with
  pauses; from the enqueue's commit to the job function's first line -> ``pickup_ms_p50/p99``.
* ``history``: claim-and-complete throughput with ``history_rows`` completed/dead rows in the
  table over the same without them -> ``history_claim_ratio``.
* ``limits``: the worker's limited claim of 10 jobs, in a queue limited to ``10/s`` and in
  one limited to ``100000/d`` whose window holds 50,000 recent starts, each with a backlog of
  up to 30,000 jobs -> ``limited_claim_ms_p50_10_per_s``, ``limited_claim_ms_p50_100000_per_d``
  and ``limited_claim_window_ratio`` (large over small).
* ``workflows``: ``jobs`` no-op jobs drained plain, then as one batch's members ->
  ``workflow_batch_drain_ratio``; a chain of up to 1,000 steps on an idle worker, from a
  step's end to the next one's start -> ``workflow_chain_pickup_ms_p50/p99``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django_pgqueue.contrib.bench.phases import drain, enqueue, history, limits, pickup, workflows

if TYPE_CHECKING:
    from django_pgqueue.contrib.bench.context import BenchContext


@dataclass(frozen=True)
class Phase:
    name: str
    run: Callable[[BenchContext], None]
    #: Phases that must run first (and do, when this one is selected).
    needs: tuple[str, ...] = ()


PHASES: dict[str, Phase] = {
    phase.name: phase
    for phase in (
        Phase("enqueue", enqueue.enqueue_bulk),
        Phase("drain", drain.drain, needs=("enqueue",)),
        Phase("single", enqueue.enqueue_single),
        Phase("pickup", pickup.pickup),
        Phase("history", history.history),
        Phase("limits", limits.limits),
        Phase("workflows", workflows.workflows),
    )
}
#: What runs without ``--phases``: all but ``workflows`` (``--phases workflows`` runs it).
DEFAULT_PHASES: tuple[str, ...] = tuple(name for name in PHASES if name != "workflows")
