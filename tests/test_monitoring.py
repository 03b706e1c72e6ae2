"""docs/monitoring.md's files: the alerting rules (promtool), the Grafana dashboard, and the
metric names they use, each documented in the page's table."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "monitoring.md"
RULES = ROOT / "docs" / "monitoring" / "alerts.yml"
DASHBOARD = ROOT / "docs" / "monitoring" / "grafana-dashboard.json"
#: The modules that name metrics: a worker process's, the probe process's, the web app's.
SOURCES = [
    ROOT / "django_pgqueue" / "worker" / "metrics.py",
    ROOT / "django_pgqueue" / "worker" / "probe.py",
    ROOT / "django_pgqueue" / "stats" / "exposition.py",
]
NAME = re.compile(r"\bpgqueue_[a-z_]+")


def documented() -> dict[str, str]:
    """Metric name -> type, from the page's table."""
    rows = re.findall(r"^\| `(pgqueue_[a-z_]+)` \| (\w+) \|", PAGE.read_text(), flags=re.M)
    assert len(rows) >= 10
    return dict(rows)


def series_names() -> set[str]:
    """Every series name a documented metric is served as (histograms: _bucket, _count, _sum)."""
    names = set()
    for name, kind in documented().items():
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return names


def test_every_metric_the_code_names_is_documented_with_its_type():
    table = documented()
    named = set()
    for source in SOURCES:
        for kind, name in re.findall(
            r"(Counter|Gauge|BatchedHistogram|GaugeMetricFamily)\(\s*\"(pgqueue_[a-z_]+)\"",
            source.read_text(),
        ):
            served = f"{name}_total" if kind == "Counter" else name
            expected = {"Counter": "counter", "BatchedHistogram": "histogram"}.get(kind, "gauge")
            assert table.get(served) == expected, (served, source.name)
            named.add(served)
    assert named == set(table)


def test_the_grafana_dashboard_is_a_dashboard_of_documented_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"]
    assert isinstance(dashboard["schemaVersion"], int)
    panels = dashboard["panels"]
    assert len(panels) >= 6
    assert len({p["id"] for p in panels}) == len(panels)
    known = series_names()
    used = set()
    for panel in panels:
        assert panel["title"] and panel["type"] in {"timeseries", "stat", "gauge", "table"}
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")"), expr
            names = set(NAME.findall(expr))
            assert names and names <= known, (panel["title"], names - known)
            used |= names
    for variable in dashboard["templating"]["list"]:
        assert set(NAME.findall(json.dumps(variable))) <= known
    # Every documented metric shows somewhere (a histogram through its series).
    shown = {re.sub(r"_(bucket|count|sum)$", "", n) for n in used} | used
    assert shown >= {n for n in documented() if n != "pgqueue_queue_counts_exact"}


def test_the_alerting_rules_use_documented_metrics():
    names = set(NAME.findall(RULES.read_text()))
    assert names and names <= series_names()
    text = PAGE.read_text()
    for alert in re.findall(r"- alert: (\w+)", RULES.read_text()):
        assert alert in text


def test_promtool_accepts_the_alerting_rules(promtool_binary):
    done = subprocess.run(
        [promtool_binary, "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 4 rules found" in done.stdout
