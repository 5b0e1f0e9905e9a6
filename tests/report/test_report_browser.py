"""report.html opened in headless Chromium (Debian's `chromium`): the page renders offline with its metric
tables and SVG charts; the screenshot kept in docs/ is taken here."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, LOCAL_2PROC, write_config

from cvs_tui.core.config.loader import load_config
from cvs_tui.core.report import write_reports
from cvs_tui.core.sources.offline import analyze_paths

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install chromium)"),
]
KEY_OK = "BS=2,PRECISION=BF16,SL=128"
KEY_NAN = "BS=4,PRECISION=BF16,SL=128"


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def two_node_report(tmp: Path) -> Path:
    """A two-node run folder: one clean sweep and one that hit NaN on both ranks, analysed for real."""
    thr = {
        KEY_OK: {
            "training.tokens_per_sec_per_gpu": {"kind": "min", "value": 1000.0},
            "training.tflops_per_sec_per_gpu": {"kind": "min", "value": 0.005},
            "training.final_loss": {"kind": "max", "value": 15.0},
            "training.loss_decreased": {"kind": "min", "value": 1},
            "training.step_time_p95_ms": {"kind": "info", "value": 3600000.0},
        },
        KEY_NAN: {
            "training.final_loss": {"kind": "max", "value": 15.0},
            "training.loss_decreased": {"kind": "min", "value": 1},
        },
    }

    def add_sweep(doc: dict) -> None:
        doc["sweeps"][KEY_NAN] = {"steps": 20, "learning_rate": 1e6}
        doc["runs"] = [KEY_OK, KEY_NAN]

    loaded = load_config(write_config(tmp, source=LOCAL_2PROC, steps=20, thresholds=thr, mutate=add_sweep))
    slugs = {r.key: r.slug for r in loaded.runs}
    folder = tmp / "run"
    for key, logs in [
        (KEY_OK, ["twoproc_node0.log", "twoproc_node1.log"]),
        (KEY_NAN, ["nan_lr1e6.log", "nan_lr1e6.log"]),
    ]:
        d = folder / "logs" / slugs[key]
        d.mkdir(parents=True)
        for rank, name in enumerate(logs):
            shutil.copy(FIXTURES / name, d / f"node{rank}.log")
    results = analyze_paths(loaded, [folder])
    return write_reports(results, tmp / "out")["html"]


def test_report_renders_with_tables_and_charts(tmp_path: Path) -> None:
    page = two_node_report(tmp_path)
    done = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert 'id="overall"' in dom and re.search(r'class="verdict">\s*FAIL', dom)
    # per run: the PASS/FAIL table, then the RECORD/N/A rows in a second table behind a <details> toggle
    tables = re.findall(r'<table class="metrics">(.*?)</table>', dom, re.S)
    assert len(tables) == 4
    assert all(
        re.search(
            r"<th>Metric</th>\s*<th>Expected</th>\s*<th>Actual</th>\s*<th>Unit</th>\s*<th>Status</th>", t
        )
        for t in tables
    )
    assert ">PASS<" in tables[0] and ">FAIL<" not in tables[0] and ">RECORD<" not in tables[0]
    assert "training.tokens_per_sec_total" in tables[1] and ">PASS<" not in tables[1]
    assert ">FAIL<" in tables[2]
    assert dom.count('<details class="rest">') == 2 and 'id="headline"' in dom
    charts = re.findall(r'<figure class="chart (loss|step-time)">\s*<svg', dom)
    assert charts.count("loss") == 2 and charts.count("step-time") == 2
    assert "<path" in dom and "node 1" in dom  # real plot paths and the second node's series
    assert re.search(r'<table class="nodes">.*?straggler|<table class="nodes">', dom, re.S)
    assert "Aborting training due to NaN loss" in dom  # error context lines


def demo_report(tmp: Path) -> Path:
    """A demo-shaped run folder (smoke, a clean sweep, a sweep that hits NaN, and the three checkpoint-resume
    phases) from the real MaxText CPU fixtures, analysed for real: the page the docs show."""
    thr = {
        KEY_OK: {
            "training.tokens_per_sec_per_gpu": {"kind": "min", "value": 1500.0},
            "training.tflops_per_sec_per_gpu": {"kind": "min", "value": 0.005},
            "training.final_loss": {"kind": "max", "value": 15.0},
            "training.loss_decreased": {"kind": "min", "value": 1},
        },
        KEY_NAN: {"training.final_loss": {"kind": "max", "value": 15.0}},
    }
    loaded = load_config(write_config(tmp, steps=20, thresholds=thr))
    folder = tmp / "run"
    for sub, name in [
        ("SMOKE", "single_20steps.log"),
        ("BS_2_PRECISION_BF16_SL_128", "single_20steps.log"),
        ("BS_4_PRECISION_BF16_SL_128", "nan_lr1e6.log"),
        ("CKPT_1", "ckpt_phase1.log"),
        ("CKPT_2", "ckpt_phase2.log"),
        ("CKPT_REF", "ckpt_reference.log"),
    ]:
        (folder / "logs" / sub).mkdir(parents=True)
        shutil.copy(FIXTURES / name, folder / "logs" / sub / "node0.log")
    return write_reports(analyze_paths(loaded, [folder]), tmp / "out")["html"]


def test_screenshot_for_the_docs(tmp_path: Path) -> None:
    page = demo_report(tmp_path)
    assert 'id="checkpoint-resume"' in page.read_text()  # the resume overlay is on the page shown
    shot = tmp_path / "shot.png"
    done = chromium(
        tmp_path, "--hide-scrollbars", "--window-size=1280,2400", f"--screenshot={shot}", page.as_uri()
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    dest = REPO / "docs" / "report-screenshot.png"
    dest.write_bytes(data)
