"""What deploy/ ships for the monitoring stack: the Prometheus alert rules pass `promtool check rules`
and their own `promtool test rules` cases (each alert fires on its series, and only then), and the
Grafana dashboard is well-formed JSON whose every query names only series cvs-tui exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from _prometheus import binary

from cvs_tui.core.export.series import BY_NAME, SERIES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus/cvs-tui-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus/cvs-tui-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana/cvs-tui-dashboard.json"
NAME = re.compile(r"\bcvs_tui_[a-z0-9_]+")


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    check = _promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert check.returncode == 0 and "SUCCESS: 5 rules found" in check.stdout, check.stdout + check.stderr
    run = _promtool("test", "rules", RULE_TESTS.name, cwd=RULES.parent)
    assert run.returncode == 0, run.stdout + run.stderr


def test_alert_rules_cover_a_stuck_node_a_fatal_finding_and_a_failed_verdict() -> None:
    rules = {r["alert"]: r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert "cvs_tui_node_seconds_since_last_step" in rules["CvsTuiNodeStuck"]
    assert "cvs_tui_node_step_seconds_p95" in rules["CvsTuiNodeStuck"]
    assert 'cvs_tui_node_health_findings{severity="fatal"}' in rules["CvsTuiFatalHealthFinding"]
    assert 'cvs_tui_run_verdicts{status="FAIL"}' in rules["CvsTuiFailedVerdict"]
    for expr in rules.values():
        assert set(NAME.findall(expr)) <= set(BY_NAME), expr


def test_a_broken_rule_fails_promtool(tmp_path: Path) -> None:
    """The check can fail: a rule whose PromQL does not parse is refused."""
    bad = RULES.read_text().replace("> clamp_min(", "> clamp_min((", 1)
    (tmp_path / "bad.yml").write_text(bad)
    assert _promtool("check", "rules", "bad.yml", cwd=tmp_path).returncode != 0


def _queries(doc: dict) -> list[str]:
    out = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            out.append(var["definition"])
    return out


def test_dashboard_loads_and_queries_only_exported_series() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "cvs-tui-live" and isinstance(doc["schemaVersion"], int)
    panels = doc["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids
    for p in panels:
        assert p["type"] and p["title"] and p["targets"], p
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, p["title"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        for t in p["targets"]:
            assert NAME.search(t["expr"]), (p["title"], t["expr"])
    names = {n for q in _queries(doc) for n in NAME.findall(q)}
    unknown = names - set(BY_NAME)
    assert not unknown, f"the dashboard queries series cvs-tui does not export: {sorted(unknown)}"
    # every exported series is on the dashboard somewhere
    assert names == {s.name for s in SERIES}, sorted({s.name for s in SERIES} - names)
    variables = {v["name"] for v in doc["templating"]["list"]}
    used = {m for q in _queries(doc) for m in re.findall(r"\$(\w+)", q)}
    assert used <= variables, used - variables
