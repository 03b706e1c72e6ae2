"""Per-window samples of a scenario, and the summary of each phase."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connections

from django_pgqueue.conf import settings
from django_pgqueue.contrib.bench.scenarios import queries


@dataclass
class Sample:
    """One window of ``seconds``, ending ``t`` seconds after the scenario started."""

    t: float
    seconds: float
    phase: str
    offered: int  # jobs the producer committed in the window
    completed: int  # jobs that finished in the window
    offered_per_s: float
    completed_per_s: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    depth: int  # committed, not finished, at the window's end
    dead_tuples: dict[str, int] = field(default_factory=dict)
    live_tuples: dict[str, int] = field(default_factory=dict)
    index_kib: dict[str, int] = field(default_factory=dict)
    load_1m: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PhaseSummary:
    name: str
    seconds: float
    offered_per_s: float
    completed_per_s: float
    #: The worst 10 s window (two 5 s samples), completed over offered, in percent.
    worst_10s_completion_pct: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    worst_window_p95_ms: float | None
    max_depth: int
    end_depth: int
    dead_tuples_end: dict[str, int]
    dead_tuples_max: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _ms(value: Any) -> float | None:
    return None if value is None else round(float(value) * 1000, 2)


def finished_between(queue: str, start: float, end: float) -> tuple[int, list[float | None]]:
    """Jobs of ``queue`` finished in [start, end) (wall times), and p50/p95/p99/max in ms."""
    with connections[settings.DATABASE].cursor() as cursor:
        cursor.execute(
            queries.FINISHED_IN_WINDOW,
            [datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC), queue],
        )
        count, pcts, highest = cursor.fetchone()
    values = list(pcts) if pcts else [None, None, None]
    return int(count), [_ms(v) for v in values] + [_ms(highest)]


def table_stats() -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Dead tuples and live tuples per queue table; index sizes in KiB."""
    with connections[settings.DATABASE].cursor() as cursor:
        cursor.execute(queries.TABLE_STATS)
        rows = cursor.fetchall()
        cursor.execute(queries.INDEX_SIZES)
        indexes = {name: int(kib) for name, kib in cursor.fetchall()}
    return (
        {name: int(dead) for name, _, dead, _, _ in rows},
        {name: int(live) for name, live, _, _, _ in rows},
        indexes,
    )


def unfinished(queue: str) -> int:
    """Jobs of ``queue`` not finished (a full count: once, at the end)."""
    with connections[settings.DATABASE].cursor() as cursor:
        cursor.execute(queries.UNFINISHED, [queue])
        return int(cursor.fetchone()[0])


def server_settings() -> dict[str, str]:
    with connections[settings.DATABASE].cursor() as cursor:
        cursor.execute(queries.SERVER_SETTINGS)
        return dict(cursor.fetchall())


def load_1m() -> float:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else 0.0


def summarize(
    name: str,
    samples: Sequence[Sample],
    percentiles: Sequence[float | None],
) -> PhaseSummary:
    """One phase's figures from its samples and its exact latency percentiles."""
    seconds = sum(s.seconds for s in samples)
    offered = sum(s.offered for s in samples)
    completed = sum(s.completed for s in samples)
    worst: float | None = None
    for first, second in itertools.pairwise(samples):
        pair_offered = first.offered + second.offered
        if pair_offered:
            pct = 100 * (first.completed + second.completed) / pair_offered
            worst = pct if worst is None else min(worst, pct)
    if worst is None and samples and samples[0].offered:
        worst = 100 * samples[0].completed / samples[0].offered
    window_p95 = [s.p95_ms for s in samples if s.p95_ms is not None]
    tables = sorted({t for s in samples for t in s.dead_tuples})
    return PhaseSummary(
        name=name,
        seconds=round(seconds, 1),
        offered_per_s=round(offered / seconds, 1) if seconds else 0.0,
        completed_per_s=round(completed / seconds, 1) if seconds else 0.0,
        worst_10s_completion_pct=None if worst is None else round(worst, 1),
        p50_ms=percentiles[0],
        p95_ms=percentiles[1],
        p99_ms=percentiles[2],
        worst_window_p95_ms=max(window_p95) if window_p95 else None,
        max_depth=max((s.depth for s in samples), default=0),
        end_depth=samples[-1].depth if samples else 0,
        dead_tuples_end=dict(samples[-1].dead_tuples) if samples else {},
        dead_tuples_max={t: max(s.dead_tuples.get(t, 0) for s in samples) for t in tables},
    )
