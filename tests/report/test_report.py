"""report.html, junit.xml and summary.md rendered from a results model, and `cvs-tui report`."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _analysis_samples import load_local, sample_results

from cvs_tui.cli.main import main
from cvs_tui.core.judge.definitions import METRIC_DEFINITIONS
from cvs_tui.core.judge.window import WINDOW_DEFINITION
from cvs_tui.core.report import write_reports
from cvs_tui.core.report.markdown import md_cell
from cvs_tui.core.results import StageRecord, write_results

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def results(tmp_path: Path):
    res = sample_results(load_local(tmp_path / "", steps=20), fail=True)
    res.stages = [
        StageRecord(name="preflight", state="passed", started_at=1.0, ended_at=2.5),
        StageRecord(name="rdma", state="skipped", detail="single-node config"),
        StageRecord(name="run:x", state="failed", detail="loss went <NaN>", started_at=3.0, ended_at=9.0),
    ]
    return res


def test_html_is_self_contained_escaped_and_complete(tmp_path: Path, results) -> None:
    paths = write_reports(results, tmp_path / "out")
    text = paths["html"].read_text()
    # overall banner, stages, metric table header, per-node table, environment
    assert 'id="overall"' in text and ">FAIL<" in text
    assert re.search(r"<th>Metric</th><th>Expected</th><th>Actual</th><th>Unit</th><th>Status</th>", text)
    assert "preflight" in text and "1.5 s" in text
    assert (
        text.count('<figure class="chart loss">') == 2 and text.count('<figure class="chart step-time">') == 2
    )
    assert text.count("<svg") >= 4
    assert "Step logger source" in text and "metric_logger.py:265" in text
    # log text is escaped, never markup
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "&lt;NaN&gt;" in text and "&lt;b&gt;" in text
    # offline: nothing fetched (SVG namespace declarations are identifiers, not fetches)
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", text)
    assert "url(http" not in text and "<link" not in text and "@import" not in text
    # every metric definition is shown, the same text as docs/metrics.md
    docs = (REPO / "docs/metrics.md").read_text()
    for name, d in METRIC_DEFINITIONS.items():
        assert html.escape(d.definition, quote=False) in text.replace("&#39;", "'"), name
        assert d.definition in docs, name
    assert WINDOW_DEFINITION in docs
    # charts have distinct ids so several SVGs on one page do not collide
    ids = re.findall(r'<clipPath id="([^"]+)"', text)
    assert len(ids) == len(set(ids))


def test_junit_counts_and_messages(tmp_path: Path, results) -> None:
    paths = write_reports(results, tmp_path)
    root = ET.parse(paths["junit"]).getroot()
    suites = root.findall("testsuite")
    assert suites[0].get("name") == "stages"
    stages = suites[0].findall("testcase")
    assert [c.get("name") for c in stages] == ["preflight", "rdma", "run:x"]
    assert stages[1].find("skipped") is not None and stages[2].find("failure") is not None
    run_suites = suites[1:]
    assert len(run_suites) == len(results.runs)
    for suite, run in zip(run_suites, results.runs, strict=True):
        cases = suite.findall("testcase")
        assert len(cases) == 1 + len(run.verdicts)
        assert {c.get("name") for c in cases[1:]} == {v.metric for v in run.verdicts}
        fails = [c for c in cases if c.find("failure") is not None]
        expected = sum(v.status == "FAIL" for v in run.verdicts) + (run.outcome != "complete")
        assert len(fails) == expected == int(suite.get("failures"))
    bad = run_suites[1]
    outcome = bad.find("testcase[@name='outcome']/failure")
    assert outcome is not None and "nan" in outcome.get("message")
    total = sum(int(s.get("tests")) for s in suites)
    assert int(root.get("tests")) == total


def test_markdown_summary(tmp_path: Path, results) -> None:
    md = write_reports(results, tmp_path)["md"].read_text()
    assert md.startswith("## ❌ FAIL")
    assert "| Metric | Expected | Actual | Unit | Status |" in md
    assert "`training.final_loss`" in md and "❌ FAIL" in md
    assert md_cell("a|b\nc") == "a\\|b c"


def test_report_command_rerenders(tmp_path: Path, results, capsys) -> None:
    src = write_results(results, tmp_path / "r" / "results.json")
    assert main(["report", str(src), "--out", str(tmp_path / "again")]) == 1
    out = capsys.readouterr().out
    assert "FAIL  overall" in out
    assert (tmp_path / "again" / "report.html").read_text().count("<svg") >= 4
    # passing results exit 0, written next to the results file by default
    ok = sample_results(load_local(tmp_path / "", steps=20))
    src2 = write_results(ok, tmp_path / "ok" / "results.json")
    assert main(["report", str(src2)]) == 0
    assert (tmp_path / "ok" / "junit.xml").exists()


def test_report_command_bad_input_exits_2(tmp_path: Path, capsys) -> None:
    p = tmp_path / "results.json"
    p.write_text("{}")
    assert main(["report", str(p)]) == 2
    assert "no schema_version" in capsys.readouterr().err
