"""The human-readable report of a benchmark run."""

from __future__ import annotations

from typing import Any

from django_pgqueue.contrib.bench.results import BenchResult, MemoryResult


def describe(result: BenchResult) -> list[tuple[str, str, str]]:
    """(figure, value, target) rows for the human-readable table."""

    def fmt(value: float | None, spec: str) -> str:
        return "skipped" if value is None else format(value, spec)

    return [
        ("enqueue_bulk_per_s", fmt(result.enqueue_bulk_per_s, ",.0f"), ">= 50,000"),
        ("enqueue_single_ms_p50", fmt(result.enqueue_single_ms_p50, ".3f"), "<= 1.5"),
        ("enqueue_single_ms_p99", fmt(result.enqueue_single_ms_p99, ".3f"), ""),
        ("drain_per_s", fmt(result.drain_per_s, ",.0f"), ">= 10,000 (2 processes)"),
        ("pickup_ms_p50", fmt(result.pickup_ms_p50, ".3f"), "<= 5"),
        ("pickup_ms_p99", fmt(result.pickup_ms_p99, ".3f"), "<= 25"),
        ("history_claim_ratio", fmt(result.history_claim_ratio, ".3f"), ">= 0.9"),
        ("limited_claim_ms_p50_10_per_s", fmt(result.limited_claim_ms_p50_10_per_s, ".3f"), ""),
        (
            "limited_claim_ms_p50_100000_per_d",
            fmt(result.limited_claim_ms_p50_100000_per_d, ".3f"),
            "",
        ),
        ("limited_claim_window_ratio", fmt(result.limited_claim_window_ratio, ".3f"), "<= 2"),
    ]


def table_lines(result: BenchResult) -> list[str]:
    """The table of figures, the supporting details, the machine and the settings."""
    rows = [("figure", "measured", "target"), *describe(result)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [""]
    for index, (name, value, target) in enumerate(rows):
        lines.append(f"{name:<{widths[0]}}  {value:>{widths[1]}}  {target}")
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    for name, value in result.details.items():
        lines.append(f"{name}: {value}")
    lines.append(machine_line(result.machine))
    lines.append("settings: " + ", ".join(f"{k}={v}" for k, v in result.settings.items()))
    return lines


def machine_line(machine: dict[str, Any]) -> str:
    """What the figures were measured on, in one line (:func:`.measurement.machine_info`)."""
    end = machine.get("load_average_1m_end")
    return (
        f"machine: {machine.get('cpu_count')} CPUs ({machine.get('cpu_model')}), "
        f"load {machine.get('load_average_1m')}"
        + ("" if end is None else f" -> {end}")
        + f", PostgreSQL {machine.get('postgresql')} "
        f"(synchronous_commit={machine.get('postgresql_synchronous_commit')}, "
        f"autovacuum={machine.get('postgresql_autovacuum')}), "
        f"Python {machine.get('python')}, Django {machine.get('django')}, "
        f"psycopg {machine.get('psycopg')} ({machine.get('psycopg_impl')})"
    )


def memory_lines(memory: MemoryResult) -> list[str]:
    """The ``--memory`` report."""
    lines = [
        f"Worker RSS after {memory.first_jobs:,} jobs: {memory.rss_kib_first:,} KiB\n"
        f"Worker RSS after {memory.jobs:,} jobs: {memory.rss_kib_end:,} KiB "
        f"(peak {memory.hwm_kib_end:,} KiB, {memory.seconds:.0f} s)"
    ]
    lines.extend(f"  {done:>10,} jobs: {rss:,} KiB" for done, rss in memory.samples)
    return lines
