"""The human-readable report of a scenario: one row per phase, then what it ran on."""

from __future__ import annotations

from django_pgqueue.contrib.bench.scenarios.runner import ScenarioResult

COLUMNS = (
    ("phase", "{:<9}"),
    ("s", "{:>5}"),
    ("offered/s", "{:>9}"),
    ("done/s", "{:>8}"),
    ("worst10s%", "{:>9}"),
    ("p50 ms", "{:>8}"),
    ("p95 ms", "{:>9}"),
    ("p99 ms", "{:>9}"),
    ("worst p95", "{:>9}"),
    ("max depth", "{:>9}"),
    ("dead tuples at end (max)", "{}"),
)


def _num(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def lines(result: ScenarioResult) -> list[str]:
    header = "  ".join(fmt.format(name) for name, fmt in COLUMNS)
    out = [header, "-" * len(header)]
    for p in result.phases:
        dead = ", ".join(
            f"{t} {p.dead_tuples_end.get(t, 0):,} ({p.dead_tuples_max.get(t, 0):,})"
            for t in sorted(p.dead_tuples_max)
            if p.dead_tuples_max.get(t)
        )
        values = (
            p.name,
            _num(p.seconds),
            _num(p.offered_per_s),
            _num(p.completed_per_s),
            _num(p.worst_10s_completion_pct, ".1f"),
            _num(p.p50_ms, ",.1f"),
            _num(p.p95_ms, ",.1f"),
            _num(p.p99_ms, ",.1f"),
            _num(p.worst_window_p95_ms, ",.1f"),
            _num(p.max_depth),
            dead or "0",
        )
        out.append("  ".join(fmt.format(v) for (_, fmt), v in zip(COLUMNS, values, strict=True)))
    out.append("")
    for key, value in result.details.items():
        out.append(f"{key}: {value}")
    server = result.server
    machine = result.machine
    out.append(
        f"server: PostgreSQL {server.get('server_version')}, autovacuum={server.get('autovacuum')}"
        f", synchronous_commit={server.get('synchronous_commit')}, "
        f"shared_buffers={server.get('shared_buffers')} (8kB pages), fsync={server.get('fsync')}"
    )
    out.append(
        f"machine: {machine.get('cpu_count')} CPUs ({machine.get('cpu_model')}), load "
        f"{machine.get('load_average_1m')} at start, {machine.get('load_average_1m_end')} at end"
    )
    out.append(f"samples: {result.samples_path}")
    out.append(f"chart: {result.chart_path}")
    return out
