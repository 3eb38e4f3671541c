"""The alert rules and the Grafana dashboard in docs/observability/: the rules pass
`promtool check rules` and their own unit tests (`promtool test rules`), every dashboard query
parses as PromQL, and every metric either names is one Alfred exports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import Counter, Histogram

from alfred import metrics
from alfred.metrics_state import ALFRED_GAUGES, BrokerQueues
from executions.metrics import EXECUTION_GAUGES

ROOT = Path(__file__).resolve().parents[2]
OBSERVABILITY = ROOT / "docs" / "observability"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("ALFRED_REQUIRE_PROMTOOL"),
    reason="no promtool (scripts/install-promtool installs Debian's prometheus package)",
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None, "ALFRED_REQUIRE_PROMTOOL=1 and no promtool"
    return subprocess.run(
        [PROMTOOL, *args], cwd=OBSERVABILITY, capture_output=True, text=True, timeout=60
    )


def exported() -> set[str]:
    """Every series name Alfred exports: its counters and histograms with the suffixes
    prometheus-client gives them, and the gauges read from the database."""
    names = {gauge.name for gauge in (*ALFRED_GAUGES, *EXECUTION_GAUGES)} | {BrokerQueues.NAME}
    for found in vars(metrics).values():
        if isinstance(found, Counter):
            names |= {f"{found._name}_total", f"{found._name}_created"}
        elif isinstance(found, Histogram):
            names |= {f"{found._name}_{suffix}" for suffix in ("bucket", "count", "sum")}
    return names


def dashboard_queries() -> list[str]:
    dashboard = json.loads((OBSERVABILITY / "grafana-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def rule_queries() -> list[str]:
    rules = yaml.safe_load((OBSERVABILITY / "alerts.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


@needs_promtool
def test_the_alert_rules_check_and_pass_their_unit_tests():
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # every alert the rules define is exercised by the unit tests
    alerts = {
        rule["alert"]
        for rule in yaml.safe_load((OBSERVABILITY / "alerts.yml").read_text())["groups"][0]["rules"]
    }
    covered = set(re.findall(r"alertname: (\w+)", (OBSERVABILITY / "alerts.test.yml").read_text()))
    assert {"AlfredRunNotStarting", "AlfredLaneBlocked", "AlfredNoBeatTick"} <= covered <= alerts
    # executions failing, and a target Prometheus cannot scrape, are alerted on (tested)
    assert {"AlfredExecutionsFailing", "AlfredScrapeTargetDown"} <= covered
    assert "AlfredBrokerQueueGrowing" in covered


@needs_promtool
def test_every_dashboard_query_is_promql(tmp_path):
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"alfred:dashboard_{n}", "expr": query}
                    for n, query in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", str(tmp_path / "dashboard.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_rules_and_the_dashboard_name_only_metrics_alfred_exports():
    names = exported()
    for query in (*rule_queries(), *dashboard_queries()):
        for name in re.findall(r"\b(alfred_[a-z_]+)\b", query):
            assert name in names, f"{name} in {query!r} is not a metric Alfred exports"
    used = {
        n
        for q in (*rule_queries(), *dashboard_queries())
        for n in re.findall(r"\b(alfred_[a-z_]+)\b", q)
    }
    for name in (*(g.name for g in (*ALFRED_GAUGES, *EXECUTION_GAUGES)), BrokerQueues.NAME):
        assert name in used, f"{name} is in neither the dashboard nor an alert"
    dashboard = " ".join(dashboard_queries())
    assert BrokerQueues.NAME in dashboard
