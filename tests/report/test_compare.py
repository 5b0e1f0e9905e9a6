"""`cvs-tui compare` on real MaxText CPU runs (tests/fixtures/compare, made by its regen.sh).

Every side goes through the real parser and analysis (raw node logs + the local config), or through a
results.json / run folder written by them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from _analysis_samples import write_config

from cvs_tui.cli.main import main
from cvs_tui.core import compare as cmp
from cvs_tui.core.errors import UserError
from cvs_tui.core.results import write_results

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "compare"
KEY = "BS=2,PRECISION=BF16,SL=128"
PERF = [m.id for m in cmp.PERF_METRICS]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_config(tmp_path_factory.mktemp("cfg"), steps=50, runs=[KEY]))


@pytest.fixture(scope="module")
def config4(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The config the bigger_model run was made with: 4 decoder layers."""

    def four(doc: dict) -> None:  # type: ignore[type-arg]
        doc["train_params"]["maxtext_config"]["base_num_decoder_layers"] = 4

    return str(write_config(tmp_path_factory.mktemp("cfg4"), steps=50, runs=[KEY], mutate=four))


@pytest.fixture(scope="module")
def side(config: str):  # type: ignore[no-untyped-def]
    cache: dict[tuple[str, str], cmp.RunInput] = {}

    def load(*names: str, cfg: str | None = None) -> list[cmp.RunInput]:
        for n in names:
            if (n, cfg or config) not in cache:
                cache[(n, cfg or config)] = cmp.load_input(
                    str(FIX / f"{n}.log"), config=cfg or config, side="base"
                )
        return [cache[(n, cfg or config)] for n in names]

    return load


def _rows(rep: cmp.CompareReport) -> dict[str, cmp.MetricDelta]:
    assert len(rep.runs) == 1 and rep.runs[0].key == KEY
    return {m.metric: m for m in rep.runs[0].metrics}


SAME_A = ("same_a1", "same_a2", "same_a3")
SAME_B = ("same_b1", "same_b2", "same_b3")
SLOW = ("slow1", "slow2", "slow3")


def test_identical_configs_repeated_are_no_change(side) -> None:  # type: ignore[no-untyped-def]
    rep = cmp.compare(side(*SAME_A), side(*SAME_B))
    rows = _rows(rep)
    for mid in PERF:
        assert rows[mid].verdict == cmp.NO_CHANGE, (mid, rows[mid])
        assert len(rows[mid].base_runs) == 3 and rows[mid].base_cv_pct is not None
        assert "run-to-run" in rows[mid].method
    assert rows["final_loss"].verdict == cmp.NO_CHANGE
    rc = rep.runs[0]
    assert rc.comparable and not rc.banner and rc.verdict == cmp.NO_CHANGE
    assert rc.loss.verdict == cmp.NO_CHANGE and rc.loss.shared_steps == 50 and rc.loss.atol == 1e-3
    assert not rep.regressed


def test_one_run_per_side_is_inconclusive_without_within_run(side) -> None:  # type: ignore[no-untyped-def]
    rows = _rows(cmp.compare(side("same_a1"), side("same_b1")))
    for mid in PERF:
        assert rows[mid].verdict == cmp.INCONCLUSIVE
        assert "repetitions" in rows[mid].reason
        assert rows[mid].band_lo_pct is not None  # the within-run band is still shown
    assert rows["final_loss"].verdict == cmp.NO_CHANGE  # losses are deterministic per step


def test_same_log_within_run_is_no_change(side) -> None:  # type: ignore[no-untyped-def]
    rows = _rows(cmp.compare(side("same_b1"), side("same_b1"), within_run=True))
    for mid in PERF:
        assert rows[mid].verdict == cmp.NO_CHANGE and rows[mid].delta == 0


def test_slower_machine_is_regressed_with_the_right_sign(side) -> None:  # type: ignore[no-untyped-def]
    rep = cmp.compare(side(*SAME_A), side(*SLOW))
    rows = _rows(rep)
    assert rep.runs[0].comparable, rep.runs[0].banner
    p50 = rows["step_time_p50_ms"]
    assert p50.verdict == cmp.REGRESSED and p50.delta is not None and p50.delta > 0
    assert (p50.band_lo_pct or 0) > 0
    tok = rows["tokens_per_sec_per_device"]
    assert tok.verdict == cmp.REGRESSED and tok.delta is not None and tok.delta < 0
    assert rows["tflops_per_sec_per_device"].verdict == cmp.REGRESSED
    assert rows["final_loss"].verdict == cmp.NO_CHANGE  # same recipe, same numbers
    assert rep.regressed and rep.verdict == cmp.REGRESSED
    back = _rows(cmp.compare(side(*SLOW), side(*SAME_A)))
    assert back["step_time_p50_ms"].verdict == cmp.IMPROVED
    assert back["tokens_per_sec_per_device"].verdict == cmp.IMPROVED


def test_injected_stalls_do_not_flip_verdicts(side) -> None:  # type: ignore[no-untyped-def]
    plain_rep = cmp.compare(side(*SAME_A), side(*SAME_B))
    plain = _rows(plain_rep)
    assert plain["stall_seconds"].verdict == cmp.NO_CHANGE
    for stalled in ("stall_ckpt", "stall_bare"):
        rep = cmp.compare(side(*SAME_A), side(stalled, "same_b2", "same_b3"))
        rows = _rows(rep)
        for mid in PERF:
            assert rows[mid].verdict == plain[mid].verdict, (stalled, mid, rows[mid])
        # the stall is compared on its own row, and the run's verdict stays the steady rates'
        st = rows["stall_seconds"]
        assert st.verdict == cmp.REGRESSED and st.delta is not None and st.delta > 1.0, (stalled, st)
        assert rep.runs[0].verdict == plain_rep.runs[0].verdict
        ex = next(e for e in rep.runs[0].excluded if e.side == "candidate" and stalled in e.run)
        reasons = dict(ex.excluded)
        if stalled == "stall_ckpt":
            assert "checkpoint save at step 25" in reasons[26]
        else:
            # the judge's stall rule takes the step out of the window first, with its reason
            assert reasons[30].startswith("stall: ") and "unexplained" in reasons[30]
    # one pair judged within the runs: the stretched step leaves the medians and the throughput alone
    for stalled in ("stall_ckpt", "stall_bare"):
        rows = _rows(cmp.compare(side("same_b1"), side(stalled), within_run=True))
        for mid in PERF:
            assert rows[mid].verdict == cmp.NO_CHANGE, (stalled, mid, rows[mid])


def test_other_model_is_not_comparable(side, config4: str) -> None:  # type: ignore[no-untyped-def]
    rep = cmp.compare(side("same_b1"), side("bigger_model", cfg=config4))
    rc = rep.runs[0]
    assert not rc.comparable and rc.verdict == cmp.NOT_COMPARABLE
    # the tiny model prints 0.001 B parameters and 0.00 TFLOPs per step with 2 or 4 layers: the config
    # names the difference
    assert rc.banner == ["maxtext_config.base_num_decoder_layers differs: base 2, candidate 4"]
    assert all(m.verdict == cmp.NOT_COMPARABLE for m in rc.metrics)
    assert not rep.regressed


def test_other_jax_is_not_comparable_and_named(side) -> None:  # type: ignore[no-untyped-def]
    rc = cmp.compare(side("same_b1"), side("other_jax")).runs[0]
    assert rc.verdict == cmp.NOT_COMPARABLE
    assert any(ln.startswith("JAX differs: base 0.") and "candidate 0.4.35" in ln for ln in rc.banner)
    assert any(ln.startswith("jaxlib differs") for ln in rc.banner)
    assert len(rc.banner) == 2  # nothing else differs
    same = {f.field: f for f in rc.fingerprint}
    assert same["JAX"].differs and not same["backend"].differs


def test_short_run_is_inconclusive(side) -> None:  # type: ignore[no-untyped-def]
    rep = cmp.compare(side("same_b1"), side("short"), within_run=True)
    rows = _rows(rep)
    for mid in PERF:
        assert rows[mid].verdict == cmp.INCONCLUSIVE
        assert "candidate:" in rows[mid].reason and "fewer than the 20" in rows[mid].reason
    # same LR schedule: the 12 shared steps match
    assert rep.runs[0].loss.shared_steps == 12 and rep.runs[0].loss.verdict == cmp.NO_CHANGE
    assert rep.runs[0].verdict == cmp.INCONCLUSIVE


def test_loss_divergence_reports_first_step(side) -> None:  # type: ignore[no-untyped-def]
    """The candidate is a real run whose node-0 loss from step 30 on is raised by 0.2 (a numerics change)."""
    base = side("same_b1")[0]
    res = base.results.model_copy(deep=True)
    for p in res.runs[0].nodes[0].steps:
        if p.step >= 30 and p.loss is not None:
            p.loss += 0.2
    cand = cmp.RunInput("bumped", res, base.image, dict(base.maxtext))
    rc = cmp.compare([base], [cand]).runs[0]
    assert rc.loss.first_diverging_step == 30 and rc.loss.verdict == cmp.REGRESSED
    final = next(m for m in rc.metrics if m.metric == "final_loss")
    assert final.verdict == cmp.REGRESSED and final.delta is not None and abs(final.delta - 0.2) < 1e-9


def test_window_statistics_match_analysis(side) -> None:  # type: ignore[no-untyped-def]
    """With no stall excluded, compare's figures are analysis's figures over the same window."""
    inp = side("same_a1")[0]
    run = inp.results.runs[0]
    s = cmp.run_samples(run)
    assert len(s.samples) == len(run.window.steps) >= cmp.COMPARE_MIN_STEPS
    by = {m.id: m for m in cmp.PERF_METRICS}
    p50 = run.metric("training.step_time_p50_ms")
    tok = run.metric("training.tokens_per_sec_per_gpu")
    assert p50 is not None and p50.value is not None and tok is not None and tok.value is not None
    assert math.isclose(by["step_time_p50_ms"].stat(s.samples), p50.value, rel_tol=1e-9)
    assert math.isclose(by["tokens_per_sec_per_device"].stat(s.samples), tok.value, rel_tol=1e-9)


def test_cli_outputs_and_exit_codes(side, config: str, config4: str, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # results.json and a run folder are inputs too
    folder = tmp_path / "base_run"
    write_results(side("same_a1")[0].results, folder / "results.json")
    js, html = tmp_path / "c.json", tmp_path / "c.html"
    argv = ["compare", "--base", str(folder), str(FIX / "same_a2.log"), str(FIX / "same_a3.log")]
    argv += ["--candidate", *(str(FIX / f"{n}.log") for n in SLOW), "--config", config]
    assert main([*argv, "--json", str(js), "--html", str(html)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSED" in out and "step time p50" in out
    doc = json.loads(js.read_text())
    assert doc["schema"] == "cvs-tui-compare/1" and doc["regressed"] is True
    assert doc["runs"][0]["metrics"][0]["verdict"] == "REGRESSED"
    page = html.read_text()
    assert "--pass:#2e7d32" in page  # report.html's stylesheet
    assert "REGRESSED" in page and "Environment fingerprint" in page
    # identical repetitions: exit 0; another model: exit 0, but 1 with --strict
    same = ["compare", "--base", *(str(FIX / f"{n}.log") for n in SAME_A)]
    same += ["--candidate", *(str(FIX / f"{n}.log") for n in SAME_B), "--config", config]
    assert main(same) == 0
    pair = ["compare", str(FIX / "same_b1.log"), str(FIX / "bigger_model.log"), "--config", config]
    pair += ["--candidate-config", config4]
    assert main(pair) == 0
    assert "NOT COMPARABLE" in capsys.readouterr().out
    assert main([*pair, "--strict"]) == 1


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["compare", "/nonexistent/a.json", "/nonexistent/b.json"], "no such file or folder"),
        (["compare", str(FIX / "same_a1.log"), str(FIX / "same_b1.log")], "add --config CONFIG"),
        (["compare", "x", "y", "--base", "z"], "not both"),
        (["compare", "x"], "give both BASE and CANDIDATE"),
        (["compare", "--base", "x"], "--candidate"),
    ],
)
def test_bad_input_exits_2(argv: list[str], needle: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_bad_threshold_and_no_shared_key(side, config: str, capsys) -> None:  # type: ignore[no-untyped-def]
    a = str(FIX / "same_a1.log")
    assert main(["compare", a, a, "--config", config, "--threshold-pct", "nan"]) == 2
    assert "--threshold-pct" in capsys.readouterr().err
    other = side("same_b1")[0]
    res = other.results.model_copy(deep=True)
    res.runs[0].key = "OTHER"
    with pytest.raises(UserError, match="no run key is present on both sides"):
        cmp.compare(side("same_a1"), [cmp.RunInput("x", res)])


def _rendered(report: cmp.CompareReport, width: int) -> str:
    import io

    from rich.console import Console

    from cvs_tui.cli.commands.compare import render

    buf = io.StringIO()
    render(report, Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def test_answer_first_footnotes_and_whole_verdicts(side) -> None:  # type: ignore[no-untyped-def]
    rep = cmp.compare(side("same_a1"), side("slow1"))
    for width in (80, 160):
        lines = _rendered(rep, width).splitlines()
        # the first line after the header and a blank is the run's answer: verdict, key, biggest change
        assert lines[4].startswith("INCONCLUSIVE") and KEY in lines[4], lines[:6]
        assert "biggest Δ step time p50 +206.5 %" in lines[4]
        text = "\n".join(lines)
        # the why shared by five rows is one footnote, printed once, referenced by number
        why = "one run per side: run-to-run variance unknown"
        assert text.count(why) == 1 and text.count("[1]") >= 5
        assert "INCONC…" not in text and re.search(
            r"│ INCONCLUSIVE +│", text
        )  # the verdict column never shrinks
        assert lines[-1] == "overall: INCONCLUSIVE"
    assert not rep.same_run


def test_a_run_compared_with_itself_says_so_in_a_few_lines(side) -> None:  # type: ignore[no-untyped-def]
    one = side("same_a1")
    rep = cmp.compare(one, one)
    assert rep.same_run
    out = _rendered(rep, 80)
    assert "base and candidate are the same run" in out
    assert len(out.splitlines()) <= 10, out
    page = cmp.render_html(rep)
    assert 'id="same-run"' in page and page.index('id="answer"') < page.index('id="run-1"')
    # two different runs are not the same run, even when they are repetitions of one recipe
    assert not cmp.compare(side("same_a1"), side("same_a2")).same_run


# Pairs of identical configs run on the same loaded machine (the a and b repetitions): a within-run
# judgement must not call any of them a change.
SAME_PAIRS = [(a, b) for a in (*SAME_A, *SAME_B) for b in (*SAME_A, *SAME_B) if a != b]


@pytest.mark.parametrize(("a", "b"), SAME_PAIRS)
def test_within_run_on_a_loaded_machine_calls_no_change_a_verdict(side, a: str, b: str) -> None:  # type: ignore[no-untyped-def]
    """Before the drift rule 28 of these 30 ordered pairs came out IMPROVED or REGRESSED (up to +142 % on
    the median step time) though the code, config and machine were the same."""
    rc = cmp.compare(side(a), side(b), within_run=True).runs[0]
    assert rc.verdict in (cmp.NO_CHANGE, cmp.INCONCLUSIVE), (a, b, rc.verdict)
    for m in rc.metrics:
        if m.metric in PERF:
            assert m.verdict in (cmp.NO_CHANGE, cmp.INCONCLUSIVE), (a, b, m)
            if m.verdict == cmp.INCONCLUSIVE:
                assert m.reason.startswith(("noise band: ", "contradicted by ")), m.reason


def test_within_run_noise_band_names_the_drift(side) -> None:  # type: ignore[no-untyped-def]
    rows = _rows(cmp.compare(side("same_a1"), side("same_a2"), within_run=True))
    p50 = rows["step_time_p50_ms"]
    # the step-to-step band excludes zero (+100 %), each run's own quarters move the median more
    assert p50.verdict == cmp.INCONCLUSIVE and p50.delta_pct is not None and p50.delta_pct > 50
    assert p50.base_drift_pct is not None and p50.candidate_drift_pct is not None
    assert max(p50.base_drift_pct, p50.candidate_drift_pct) >= p50.delta_pct
    assert p50.reason.startswith("noise band: step time p50 +100.0 % is within the runs' own drift (up to ")
    assert "between quarters of one run" in p50.reason


def test_within_run_still_shows_a_genuine_slowdown(side) -> None:  # type: ignore[no-untyped-def]
    """The slow runs shared one core with two busy loops: against the steadiest runs that is still a
    regression within the runs, and the reverse an improvement."""
    for base in ("same_b1", "same_b2", "same_b3"):
        for slow in SLOW:
            rc = cmp.compare(side(base), side(slow), within_run=True).runs[0]
            assert rc.verdict == cmp.REGRESSED, (base, slow, [(m.metric, m.verdict) for m in rc.metrics])
            tok = _rows(cmp.compare(side(base), side(slow), within_run=True))["tokens_per_sec_per_device"]
            assert tok.verdict == cmp.REGRESSED and (tok.delta_pct or 0) < -40
    rc = cmp.compare(side("slow2"), side("same_b3"), within_run=True).runs[0]
    assert rc.verdict == cmp.IMPROVED


def test_stall_row_says_why_a_short_run_has_no_stall_time(side, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A smoke-length run (the first five steps of a real log) has too few steps for a stall baseline:
    the row gives the judge's reason, not a guess that the results are old."""
    lines = (FIX / "same_b1.log").read_text().splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if "completed step: 4," in ln)
    log = tmp_path / "smoke.log"
    log.write_text("".join(lines[: cut + 1]))
    (tmp_path / "cfg").mkdir()
    cfg = str(write_config(tmp_path / "cfg", steps=5, runs=[KEY]))
    short = cmp.load_input(str(log), config=cfg, side="base")
    rows = _rows(cmp.compare([short], [short], within_run=True))
    st = rows["stall_seconds"]
    assert st.verdict == cmp.INCONCLUSIVE
    assert st.reason.startswith("stall time not measured: both sides: inconclusive: fewer than"), st.reason
    assert "older" not in st.reason
    # a full-length fresh run measures it on both sides and compares it
    full = _rows(cmp.compare(side("same_b1"), side("same_b2"), within_run=True))["stall_seconds"]
    assert full.base is not None and full.candidate is not None and full.verdict != cmp.INCONCLUSIVE
