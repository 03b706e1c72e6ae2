"""An SVG chart of a scenario: throughput and p95 start latency over time, phases shaded.

Written by hand (no plotting dependency): two panels sharing the time axis; the latency
panel is logarithmic, so 5 ms and 5 s both read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from django_pgqueue.contrib.bench.scenarios.samples import PhaseSummary, Sample

WIDTH = 900
LEFT, RIGHT = 70, 20
PANEL = 200
TOP = 64
GAP = 50
SHADES = {
    "warmup": "#eeeeee",
    "clean": "#e3f2e3",
    "stress": "#fbe3e3",
    "recovery": "#e3ebfb",
}


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:g}k" if value % 1000 == 0 else f"{value:,.0f}"
    return f"{value:g}"


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * exponent:
            return float(step * exponent)
    return float(10 * exponent)


def render(samples: Sequence[Sample], phases: Sequence[PhaseSummary], title: str) -> str:
    height = TOP + 2 * PANEL + GAP + 60
    plot_w = WIDTH - LEFT - RIGHT
    t_max = max((s.t for s in samples), default=1.0) or 1.0

    def x(t: float) -> float:
        return LEFT + plot_w * t / t_max

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    for row, text in enumerate(title.split("; ")):
        out.append(f'<text x="{LEFT}" y="{18 + 16 * row}" font-size="13">{escape(text)}</text>')
    tops = (TOP, TOP + PANEL + GAP)
    # Phases: shaded spans over both panels, named once.
    start = 0.0
    for phase in phases:
        end = start + phase.seconds
        for top in tops:
            out.append(
                f'<rect x="{x(start):.1f}" y="{top}" width="{x(end) - x(start):.1f}" '
                f'height="{PANEL}" fill="{SHADES.get(phase.name, "#f4f4f4")}"/>'
            )
        out.append(
            f'<text x="{(x(start) + x(end)) / 2:.1f}" y="{TOP - 6}" text-anchor="middle" '
            f'fill="#555">{escape(phase.name)}</text>'
        )
        start = end

    # Panel 1: jobs per second, offered and completed.
    rate_max = _nice_max(
        max([s.offered_per_s for s in samples] + [s.completed_per_s for s in samples] + [1.0]) * 1.1
    )

    def y_rate(v: float) -> float:
        return TOP + PANEL - PANEL * v / rate_max

    for i in range(5):
        v = rate_max * i / 4
        out.append(_grid(y_rate(v), _fmt(v)))
    out.append(_line([(x(s.t), y_rate(s.offered_per_s)) for s in samples], "#888", dash=True))
    out.append(_line([(x(s.t), y_rate(s.completed_per_s)) for s in samples], "#1f5fbf"))
    out.append(_label(tops[0], "jobs/s: completed (blue), offered (grey, dashed)"))

    # Panel 2: p95 start latency, log scale.
    p95s = [s.p95_ms for s in samples if s.p95_ms is not None]
    low, high = 1.0, max(100.0, max(p95s, default=1.0))
    decades = math.ceil(math.log10(high))
    high = 10.0**decades

    def y_ms(v: float) -> float:
        v = min(max(v, low), high)
        return tops[1] + PANEL - PANEL * math.log10(v / low) / math.log10(high / low)

    for d in range(decades + 1):
        v = 10.0**d
        out.append(_grid(y_ms(v), f"{_fmt(v)} ms"))
    goal = y_ms(50)
    out.append(
        f'<line x1="{LEFT}" y1="{goal:.1f}" x2="{WIDTH - RIGHT}" y2="{goal:.1f}" '
        'stroke="#c62828" stroke-dasharray="3,3"/>'
    )
    points = [(x(s.t), y_ms(s.p95_ms)) for s in samples if s.p95_ms is not None]
    out.append(_line(points, "#c0571f"))
    out.append(_label(tops[1], "p95 start latency, ms (log; red dashed: 50 ms)"))

    # Time axis.
    bottom = tops[1] + PANEL
    step = _nice_max(t_max / 8)
    t = 0.0
    while t <= t_max + 1e-9:
        out.append(f'<text x="{x(t):.1f}" y="{bottom + 16}" text-anchor="middle">{_fmt(t)}</text>')
        t += step
    out.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{bottom + 34}" text-anchor="middle">'
        "seconds since the load started</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _grid(y: float, text: str) -> str:
    return (
        f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#ccc" '
        f'stroke-width="0.5"/><text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
        f"{escape(text)}</text>"
    )


def _label(top: float, text: str) -> str:
    return f'<text x="{LEFT + 4}" y="{top + 14}" fill="#333">{escape(text)}</text>'


def _line(points: Sequence[tuple[float, float]], colour: str, dash: bool = False) -> str:
    if not points:
        return ""
    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    extra = ' stroke-dasharray="5,4"' if dash else ""
    return f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.6"{extra}/>'
