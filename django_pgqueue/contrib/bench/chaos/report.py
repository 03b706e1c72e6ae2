"""The chaos run as lines for a person."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_pgqueue.contrib.bench.chaos.run import ChaosResult


def lines(result: ChaosResult) -> list[str]:
    o = result.options
    out = [
        f"pgqueue_chaos: {o.rate:g} jobs/s of {o.job_ms:g} ms for {result.seconds:.0f} s, "
        f"{o.processes} processes x {o.threads} threads, queue {result.queue}",
        "",
        f"{'fault':<10} {'at':>7}  {'recovery':>9}  what",
    ]
    for fault in result.faults:
        recovery = f"{fault.recovery:.2f} s" if fault.recovery is not None else "none"
        out.append(f"{fault.fault:<10} {fault.at:>6.1f}s  {recovery:>9}  {fault.detail}")
    out += [
        "",
        f"jobs enqueued (confirmed): {result.enqueued:,}  (enqueue calls that failed during "
        f"faults: {result.enqueue_errors}; rows: {result.rows:,})",
        f"completed: {result.completed:,}  runs: {result.runs:,}",
        f"jobs lost: {result.lost}" + (f"  ids: {result.lost_ids}" if result.lost_ids else ""),
        f"duplicates: {result.duplicates} jobs ran more than once (at-least-once: a job a "
        "SIGKILL caught mid-run runs again)",
        "recovery: from the fault until a job enqueued after it began has completed",
    ]
    return out
