"""report.html leads with the signal: a headline table per sweep, RECORD/N/A rows behind a toggle, the
environment once, a provenance block, the checkpoint-resume overlay and integer step ticks. Every page here
is rendered from real MaxText CPU logs (tests/fixtures/maxtext) analysed by the real parser and judge."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, write_config

from cvs_tui.core.config.loader import load_config
from cvs_tui.core.judge.format import format_number
from cvs_tui.core.report.charts import loss_chart, resume_chart
from cvs_tui.core.report.html import render_html
from cvs_tui.core.report.view import WINDOW_NOTE, run_verdicts
from cvs_tui.core.results import Results
from cvs_tui.core.sources.offline import analyze_paths

KEY = "BS=2,PRECISION=BF16,SL=128"
NAN_KEY = "BS=4,PRECISION=BF16,SL=128"


@pytest.fixture(autouse=True)
def _maxtext_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/opt/maxtext-venv/bin/python")  # nothing is launched


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Results, Path]:
    """A demo-shaped run folder: two sweeps (one hits NaN), the smoke run and the three resume phases."""
    d = tmp_path_factory.mktemp("suite")
    thr = {
        KEY: {"training.tokens_per_sec_per_gpu": {"kind": "min", "value": 1000.0}},
        NAN_KEY: {"training.tokens_per_sec_per_gpu": {"kind": "min", "value": 1000.0}},
    }
    cfg = write_config(d, steps=20, thresholds=thr)
    for sub, src in [
        ("SMOKE", "single_20steps.log"),
        ("BS_2_PRECISION_BF16_SL_128", "single_20steps.log"),
        ("BS_4_PRECISION_BF16_SL_128", "nan_lr1e6.log"),
        ("CKPT_1", "ckpt_phase1.log"),
        ("CKPT_2", "ckpt_phase2.log"),
        ("CKPT_REF", "ckpt_reference.log"),
    ]:
        (d / "logs" / sub).mkdir(parents=True)
        shutil.copy(FIXTURES / src, d / "logs" / sub / "node0.log")
    return analyze_paths(load_config(cfg), [d]), cfg


def test_headline_table_per_sweep_with_thresholds(suite: tuple[Results, Path]) -> None:
    res, _ = suite
    page = render_html(res)
    head = page[page.index('id="headline"') : page.index('id="stages"')]
    for col in ("Tok/s/GPU", "Step p50 (ms)", "TFLOP/s/GPU", "MFU %", "Goodput %"):
        assert col in head
    # one row per smoke and sweep run, none for the resume phases
    assert head.count('<tr><td class="mono">') == 3 and "CKPT" not in head
    tok = res.runs[[r.key for r in res.runs].index(KEY)].metric("training.tokens_per_sec_per_gpu")
    assert tok is not None and tok.value is not None
    assert format_number(tok.value, "sig", digits=4) in head and "&gt;= 1000" in head
    assert "inconclusive" in head  # the NaN run has no steady-state figure, and says why
    assert head.count("partial run: failed") == 1  # ... and is marked as a run that did not finish
    # the headline comes before the stage table, the stage table before the per-run detail
    assert page.index('id="headline"') < page.index('id="stages"') < page.index('id="run-')


def test_record_and_na_rows_collapse_and_the_window_reason_is_said_once(suite: tuple[Results, Path]) -> None:
    res, _ = suite
    page = render_html(res)
    run = next(r for r in res.runs if r.key == NAN_KEY)
    rv = run_verdicts(run)
    assert rv.signal and all(x.v.status in ("PASS", "FAIL") for x in rv.signal)
    assert rv.rest and all(x.v.status in ("RECORD", "N/A") for x in rv.rest)
    section = page[page.index(f'id="run-{run.slug}"') :]
    section = section[: section.index("</section>")]
    assert f"{rv.record} recorded · {rv.na} n/a metric(s)</summary>" in section
    assert section.index('<table class="metrics">') < section.index('<details class="rest">')
    # the inconclusive window's reason: once in the window line, a pointer in the rows
    assert run.window.status == "inconclusive"
    assert section.count(run.window.reason) == 1 and WINDOW_NOTE in section
    # 3-4 significant digits, never the judge's 4 decimals
    for num in re.findall(r'<td class="num">([-+0-9.,]+)</td>', page):
        if "." in num:
            assert len(num.replace(",", "").lstrip("+-").replace(".", "").lstrip("0")) <= 4, num


def test_environment_once_without_zero_placeholders_and_provenance(suite: tuple[Results, Path]) -> None:
    res, cfg = suite
    page = render_html(res)
    assert page.count("<h3>Environment") == 1
    assert res.runs[0].environment.tflops_per_step == 0.0  # MaxText printed 0 on CPU: unknown
    assert "TFLOPs per step" not in page and "Memory estimate" not in page
    prov = page[page.index('id="system"') :]
    prov = prov[: prov.index("</section>")]
    assert hashlib.sha256(cfg.read_bytes()).hexdigest() in prov
    assert res.provenance.threshold_sha256 and res.provenance.threshold_sha256 in prov
    assert f'<div>cvs-tui</div><div class="mono">{res.tool_version}</div>' in prov
    assert "<div>Duration</div>" in prov and "Not recorded:" in prov
    assert res.provenance.cpu_model is None or res.provenance.cpu_model in prov


def test_resume_overlay_and_boundary_message(suite: tuple[Results, Path]) -> None:
    res, _ = suite
    svg = resume_chart(res)
    assert svg is not None and "CKPT-2 (resumed)" in svg and "CKPT-REF (reference)" in svg
    page = render_html(res)
    box = page[page.index('id="checkpoint-resume"') :]
    assert '<figure class="chart resume"><svg' in box
    assert re.search(r"max \|Δloss\| [0-9.e-]+ at step \d+ vs reference \(≤ loss_tolerance 0\.05\)", box)
    # without a reference, phase 2 is drawn over phase 1
    no_ref = res.model_copy(update={"runs": [r for r in res.runs if r.kind != "ckpt_reference"]})
    svg = resume_chart(no_ref)
    assert svg is not None and "CKPT-1 (reference)" in svg
    assert resume_chart(res.model_copy(update={"runs": res.runs[:3]})) is None


def test_step_ticks_are_integers(suite: tuple[Results, Path]) -> None:
    res, _ = suite
    run = res.runs[0].model_copy(deep=True)
    node = run.nodes[0]
    node.steps = node.steps[:3]  # three steps: matplotlib's default ticks would be 0.0, 0.5, 1.0 ...
    run.loss_curve = None
    svg = loss_chart(run)
    assert svg is not None
    ticks = re.findall(r"<text[^>]*>\s*([-0-9.,]+)\s*</text>", svg)
    assert ticks and not any("." in t for t in ticks[:3]), ticks


async def test_console_verdicts_show_the_signal_and_count_the_rest() -> None:
    """The headless verdict summary: PASS/FAIL rows in the table, RECORD/N/A as one count line."""
    from rich.console import Console

    from cvs_tui.cli.console import run_console
    from cvs_tui.core.events import RunStartEvent, SuiteEndEvent, VerdictEvent

    events: list[object] = [
        RunStartEvent("R", 10, ("h0",), at=1.0),
        VerdictEvent("R", "training.tokens_per_sec_per_gpu", "PASS", ">= 1500", 7275.3805, "tok/s/GPU"),
        VerdictEvent("R", "training.step_time_p50_ms", "RECORD", "-", 35.0, "ms/step"),
        VerdictEvent("R", "training.stall_seconds", "RECORD", "-", 0.0, "s"),
        VerdictEvent("R", "training.eval_loss", "N/A", "-", None, "loss"),
        SuiteEndEvent(True, at=2.0),
    ]

    async def source():  # type: ignore[no-untyped-def]
        for ev in events:
            yield ev

    console = Console(record=True, width=120, color_system=None)
    await run_console(source(), console=console)
    out = console.export_text()
    assert "training.tokens_per_sec_per_gpu" in out and "7,275" in out and "7275.3805" not in out
    assert "training.step_time_p50_ms" not in out and "training.eval_loss" not in out
    assert "2 recorded · 1 n/a" in out
