"""How much the dashboard's numbers may read. Each limit is read when a function runs, so it
can be lowered at run time (the tests do: ``monkeypatch.setattr(stats.limits, ...)``)."""

from __future__ import annotations

#: Partial-index counts are exact up to this many rows; above it they are estimates.
COUNT_CAP = 10_000
#: Most rows of the last hour's finished jobs read for throughput and the chart.
WINDOW_CAP = 100_000
#: Tables smaller than this are counted exactly in one sequential scan.
EXACT_TABLE_BYTES = 16 * 1024 * 1024
