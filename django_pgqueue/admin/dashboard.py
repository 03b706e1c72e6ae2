"""The queue dashboard: numbers per queue, the last hour as an inline SVG chart, the workers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from django_pgqueue import stats
from django_pgqueue.admin.base import JobAdminBase
from django_pgqueue.admin.formatting import compact_duration, period_in_words
from django_pgqueue.admin.queues import queue_settings
from django_pgqueue.states import JobStatus

CHART_WIDTH = 960
CHART_HEIGHT = 120


class QueueDashboard(JobAdminBase):
    """The dashboard page (its "retry all dead jobs" button is in :mod:`.actions`)."""

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        report = stats.queue_report()
        controls = queue_settings()
        return self.render_page(
            request,
            "django_pgqueue/admin/dashboard.html",
            "Queue dashboard",
            trail=[self.changelist_crumb()],
            here="Queue dashboard",
            report=report,
            rows=[self._dashboard_row(q, controls) for q in report.queues],
            paused=sorted(name for name, c in controls.items() if c.paused),
            queue_control_url=self.admin_url("queue_control"),
            workers=[
                {
                    "info": w,
                    "seen_ago": compact_duration(report.generated_at - w.last_seen_at),
                    "jobs_done": f"{w.jobs_done:,}",
                }
                for w in report.workers
            ],
            chart=throughput_chart(report.minutes, report.window_capped),
            can_operate=self.can_operate(request),
            changelist_url=self.admin_url("changelist"),
            statuses=JobStatus,
            retry_dead_url=self.admin_url("retry_dead"),
            retention=period_in_words(report.retention),
            dead_retention=(
                "forever"
                if report.dead_retention is None
                else period_in_words(report.dead_retention)
            ),
            duration_ms=round(report.duration * 1000, 1),
            count_cap=f"{stats.limits.COUNT_CAP:,}",
            window_cap=f"{stats.limits.WINDOW_CAP:,}",
        )

    def _dashboard_row(self, queue: stats.QueueStats, controls: dict[str, Any]) -> dict[str, Any]:
        return {
            "stats": queue,
            "control": controls.get(queue.queue),
            "oldest": compact_duration(queue.oldest_runnable_age),
            "dead_count": queue.dead.value,
        }


# ----- the chart ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    x: float
    completed_y: float
    completed_height: float
    failed_y: float
    failed_height: float
    title: str
    complete: bool


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    peak: int
    completed: int
    failed: int
    bar_width: float

    capped: bool = False

    @property
    def middle(self) -> float:
        return self.width / 2

    @property
    def summary(self) -> str:
        plus = "+" if self.capped else ""
        return (
            f"{self.completed:,}{plus} completed, "
            f"{self.failed:,}{plus} failed attempt{'' if self.failed == 1 else 's'}"
        )

    @property
    def scale_label(self) -> str:
        return f"{self.peak:,} per minute"


def throughput_chart(minutes: list[stats.Minute], capped: bool = False) -> Chart:
    """Stacked bars (completed, failed) per minute, as coordinates for an inline SVG."""
    peak = max((m.completed + m.failed for m in minutes), default=0)
    scale = (CHART_HEIGHT - 4) / peak if peak else 0.0
    step = CHART_WIDTH / max(len(minutes), 1)  # the width of a minute
    bars = []
    for i, m in enumerate(minutes):
        done_h = m.completed * scale
        fail_h = m.failed * scale
        if m.failed and fail_h < 2:
            fail_h = 2.0
        if m.completed and done_h < 1:
            done_h = 1.0
        local = timezone.localtime(m.start)
        bars.append(
            Bar(
                x=round(i * step + 1, 2),
                completed_y=round(CHART_HEIGHT - done_h, 2),
                completed_height=round(done_h, 2),
                failed_y=round(CHART_HEIGHT - done_h - fail_h, 2),
                failed_height=round(fail_h, 2),
                title=f"{local:%H:%M}: {m.completed:,} completed, {m.failed:,} failed attempts"
                + ("" if m.complete else " (partly counted)"),
                complete=m.complete,
            )
        )
    return Chart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        bars=bars,
        peak=peak,
        completed=sum(m.completed for m in minutes),
        failed=sum(m.failed for m in minutes),
        bar_width=round(max(step - 2, 1), 2),
        capped=capped,
    )
