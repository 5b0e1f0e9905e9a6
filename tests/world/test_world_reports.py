"""What a new user reads about a world log: the exception is the root cause in every report, with where
it was raised; one rank's log of a 16-node job keeps per-device figures and says its totals cover one
node; a 2024 log without Tokens/s/device gets tokens/s from the plan."""

from __future__ import annotations

import html
from pathlib import Path

from cvs_tui.core.report.html import render_html
from cvs_tui.core.report.markdown import render_markdown
from cvs_tui.core.sources.offline import analyze_paths
from world.check import WORLD
from world.judging import load_planned

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
