"""What a new user reads about a world log: the exception is the root cause in every report, with where
it was raised; one rank's log of a 16-node job keeps per-device figures and says its totals cover one
node; a 2024 log without Tokens/s/device gets tokens/s from the plan; step lines without a loss keep
every other figure, and the loss figures say why they are N/A (a gated one fails)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from cvs_tui.core.config.loader import LoadedConfig, load_config
from cvs_tui.core.judge.loss import NO_LOSS_LOGGED
from cvs_tui.core.parse.accel import PURE_ENV
from cvs_tui.core.report.html import render_html
from cvs_tui.core.report.markdown import render_markdown
from cvs_tui.core.sources.offline import analyze_paths
from world.check import WORLD
from world.judging import LOCAL_SINGLE, load_planned

RANK15 = WORLD / "maxtext" / "mi300x-16n-llama2-70b-rank15-ckpt-barrier-2025.log"
GPT3 = WORLD / "maxtext" / "a3-h100-gpt3-22b-2024.log"


def test_a_traceback_reads_as_its_exception_with_the_last_frame(tmp_path: Path) -> None:
    loaded, key = load_planned(tmp_path, steps=150, batch=7, seq=8192)
    res = analyze_paths(loaded, [RANK15], key)
    run = res.runs[0]
    assert (
        run.status == "FAIL"
        and "python traceback: jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED" in (run.reason)
    )
    assert "(last frame: utils.py:179 in _fn)" in run.reason
    md = render_markdown(res)
    assert "XlaRuntimeError: DEADLINE_EXCEEDED" in md and "utils.py:179 in _fn" in md
    page = html.unescape(render_html(res))
    assert "XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out" in page
    # the hits of one traceback are one incident: all on its exception line, whose context is the last
    # frames (the RPC line after the exception included)
    fatal = {(e.line, e.name) for e in run.errors if e.severity == "fatal"}
    first = {name for line, name in fatal if line == 71}
    assert first == {"python traceback", "jax runtime error", "coordination service", "tensorflow"}
    assert {line for line, _ in fatal} == {45, 71, 109}
    tb = next(e for e in run.errors if e.name == "python traceback")
    assert any("client.wait_at_barrier(key, timeout_ms)" in line for line in tb.context)


def test_one_ranks_log_of_a_bigger_job(tmp_path: Path) -> None:
    loaded, key = load_planned(tmp_path, steps=150, batch=7, seq=8192)
    run = analyze_paths(loaded, [RANK15], key).runs[0]
    assert run.environment.num_devices == 128 and run.environment.devices_per_node == 8
    assert any(
        "128 devices over 16 processes: 8 per node" in n and "totals cover the 1 node" in n for n in run.notes
    )


def test_tokens_from_the_plan_when_the_log_prints_none(tmp_path: Path) -> None:
    loaded, key = load_planned(tmp_path, steps=30, batch=1, seq=1024, gpus_per_node=8)
    run = analyze_paths(loaded, [GPT3], key).runs[0]
    tok = run.metric("training.tokens_per_sec_per_gpu")
    step = run.metric("training.step_time_seconds")
    assert tok is not None and step is not None and tok.value is not None and step.value is not None
    assert abs(tok.value - 1024 / step.value) < 1e-6 * tok.value


# ---------------------------------------------------------------------------------------------------------
# Step lines without a loss: AMD maxtext-slurm's README cuts them before it; here the 2024 TPU v5p guide's
# log with every `, loss: X` taken out (its steps, times and rates as logged)
DEEPSEEK = WORLD / "maxtext" / "tpu-v5p-deepseek2-16b-docs-2024.log"
LOSS_METRICS = ("training.final_loss", "training.loss_decreased", "training.loss_curve_slope")
PERF_METRICS = (
    "training.step_time_p50_ms",
    "training.tflops_per_sec_per_gpu",
    "training.tokens_per_sec_per_gpu",
    "training.goodput_pct",
)


def _planned_without_loss(tmp_path: Path, *, gate_loss: bool) -> tuple[LoadedConfig, str, Path]:
    """The deepseek log's plan (``gate_loss``: final loss gated, loss curve enforced; else the loss figures
    only recorded) and the log without its losses."""
    _, key = load_planned(tmp_path, steps=10, batch=1, seq=2048, gpus_per_node=4)
    cfg = tmp_path / LOCAL_SINGLE.name
    doc = json.loads(cfg.read_text())
    doc["loss_curve"]["enforce"] = gate_loss
    cfg.write_text(json.dumps(doc))
    if gate_loss:
        th = tmp_path / doc["threshold_json"]
        cells = json.loads(th.read_text())
        cells[key]["training.final_loss"] = {"kind": "max", "value": 15.0}
        th.write_text(json.dumps(cells))
    log = tmp_path / "deepseek-no-loss.log"
    log.write_text(re.sub(r", loss: [^,\s]+", "", DEEPSEEK.read_text()))
    assert "loss" not in log.read_text()
    return load_config(cfg), key, log


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_step_lines_without_a_loss_keep_every_figure(
    tmp_path: Path, pure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pure:
        monkeypatch.setenv(PURE_ENV, "1")
    loaded, key, log = _planned_without_loss(tmp_path, gate_loss=False)
    full = analyze_paths(loaded, [DEEPSEEK], key).runs[0]
    res = analyze_paths(loaded, [log], key)
    run = res.runs[0]
    assert run.status == "PASS" and run.nodes[0].steps_logged == 10
    for name in PERF_METRICS:  # the same steps, times and rates: the same figures
        a, b = full.metric(name), run.metric(name)
        assert a is not None and b is not None and b.value == a.value, name
    for name in LOSS_METRICS:  # N/A with why: no NaN, no "no step logged"
        m = run.metric(name)
        assert m is not None and m.value is None and m.absent == "not_produced" and m.reason == NO_LOSS_LOGGED
    assert all(p.loss is None and p.loss_text is None for p in run.nodes[0].steps)
    assert not [e for e in run.errors if "nan" in e.name.lower() or "non-finite" in e.name.lower()]
    assert NO_LOSS_LOGGED in render_markdown(res)
    assert NO_LOSS_LOGGED in html.unescape(render_html(res))


def test_a_gated_loss_the_log_lacks_fails(tmp_path: Path) -> None:
    loaded, key, log = _planned_without_loss(tmp_path, gate_loss=True)
    run = analyze_paths(loaded, [log], key).runs[0]
    assert run.status == "FAIL"
    failed = {v.metric: v.message for v in run.verdicts if v.status == "FAIL"}
    assert failed.keys() == {"training.final_loss", "training.loss_curve_slope"}
    assert all(NO_LOSS_LOGGED in msg for msg in failed.values())
