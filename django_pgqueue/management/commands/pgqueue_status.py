"""``manage.py pgqueue_status``: the admin dashboard's per-queue numbers and the periodic
schedules, as tables or JSON.

Queue names come from rows and are printed with their control characters escaped.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_pgqueue import stats
from django_pgqueue.management.options import of
from django_pgqueue.printable import printable, printable_json
from django_pgqueue.rules import WORKER_OPTIONS
from django_pgqueue.states import JobStatus, WorkerState
from django_pgqueue.stats.schedules import ScheduleStatus, schedule_report
from django_pgqueue.stats.workers import AbandonedJob, abandoned_jobs

COLUMNS = (
    ("queue", "QUEUE"),
    ("runnable", "RUNNABLE"),
    ("scheduled", "SCHEDULED"),
    (JobStatus.RUNNING.value, "RUNNING"),
    (JobStatus.COMPLETED.value, "COMPLETED"),
    (JobStatus.DEAD.value, "DEAD"),
    ("oldest", "OLDEST RUNNABLE"),
    ("completed_last_minute", "DONE/1M"),
    ("completed_last_hour", "DONE/1H"),
    ("failed_last_hour", "FAILED/1H"),
    ("workers", "WORKERS"),
)


def _age(value: timedelta | None) -> str:
    if value is None:
        return "-"
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _row(q: stats.QueueStats) -> dict[str, str]:
    cells = {name: str(getattr(q, name, "")) for name, _ in COLUMNS}
    cells["queue"] = printable(q.queue)
    cells["oldest"] = _age(q.oldest_runnable_age)
    cells["workers"] = str(q.workers)
    return cells


def render_table(report: stats.QueueReport) -> str:
    rows = [_row(q) for q in report.queues]
    widths = {name: max([len(title), *(len(r[name]) for r in rows)]) for name, title in COLUMNS}

    def line(cells: dict[str, str]) -> str:
        parts = [
            cells[name].ljust(widths[name]) if name == "queue" else cells[name].rjust(widths[name])
            for name, _ in COLUMNS
        ]
        return "  ".join(parts).rstrip()

    lines = [line(dict(COLUMNS))]
    lines += [line(r) for r in rows]
    if not rows:
        lines.append("(no queue)")
    live = sum(1 for w in report.workers if w.state == WorkerState.RUNNING)
    lines.append("")
    lines.append(f"Workers running: {live} (seen in the last hour: {len(report.workers)})")
    if not report.exact:
        lines.append(
            f"~ estimate from table statistics; + counted up to the cap "
            f"({stats.limits.COUNT_CAP:,} rows per count, "
            f"{stats.limits.WINDOW_CAP:,} for the last hour)."
        )
    return "\n".join(lines)


def render_abandoned(abandoned: list[AbandonedJob]) -> str:
    """Finished jobs whose abandoned attempt still runs in a live worker's thread."""
    lines = ["Abandoned attempts still running:"]
    lines += [f"  job #{a.job_id} {printable(a.name)}: {printable(a.label)}" for a in abandoned]
    return "\n".join(lines)


SCHEDULE_COLUMNS = (
    ("name", "SCHEDULE"),
    ("job", "JOB"),
    ("when", "WHEN"),
    ("enabled", "ENABLED"),
    ("next", "NEXT RUN"),
    ("last", "LAST RUN"),
    ("source", "SOURCE"),
    ("broken", "BROKEN"),
)


def _moment(value: Any) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S %Z}"


def render_schedules(schedules: list[ScheduleStatus]) -> str:
    """The schedules as a table (times in UTC)."""
    rows = [
        {
            "name": printable(s.name),
            "job": printable(s.job),
            "when": s.when,
            "enabled": "yes" if s.enabled else "no",
            "next": _moment(s.next_run_at) if s.enabled else "-",
            "last": _moment(s.last_run_at),
            "source": s.source,
            "broken": printable(s.broken or ""),
        }
        for s in schedules
    ]
    widths = {n: max(len(t), *(len(r[n]) for r in rows)) for n, t in SCHEDULE_COLUMNS}
    lines = [
        "  ".join(cells[n].ljust(widths[n]) for n, _ in SCHEDULE_COLUMNS).rstrip()
        for cells in [dict(SCHEDULE_COLUMNS), *rows]
    ]
    broken = sum(1 for s in schedules if s.broken and s.enabled)
    if broken:
        lines.append(f"{broken} enabled schedule(s) broken: see manage.py check --database.")
    return "\n".join(lines)


class Command(BaseCommand):
    help = (
        "Per-queue job counts, queue latency, throughput and workers (as on the dashboard), "
        "and the periodic schedules."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="QUEUE",
            type=of(WORKER_OPTIONS["queue"]),
            help="Only this queue (repeatable).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = stats.queue_report()
        if options["queues"]:
            wanted = set(options["queues"])
            report.queues = [q for q in report.queues if q.queue in wanted]
        schedules = schedule_report()
        abandoned = abandoned_jobs(None, report.workers)
        if options["json"]:
            data = {
                **report.as_dict(),
                "abandoned": [
                    {
                        "id": a.job_id,
                        "name": a.name,
                        "status": a.status,
                        "worker_id": a.worker_id,
                        "label": a.label,
                    }
                    for a in abandoned
                ],
                "schedules": [s.as_dict() for s in schedules],
            }
            self.stdout.write(printable_json(data, indent=2))
        else:
            table = render_table(report)
            if abandoned:
                table += "\n\n" + render_abandoned(abandoned)
            if schedules:
                table += "\n\n" + render_schedules(schedules)
            self.stdout.write(table)
