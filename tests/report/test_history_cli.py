"""`cvs-tui history` end to end through the CLI: real MaxText CPU logs (tests/fixtures/compare) judged by
`analyze`, which registers each run folder; a series is then built from one real run folder whose
results.json is copied with its figures scaled (as a slower or faster repeat would log them)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from _analysis_samples import write_config

from cvs_tui.cli.main import main
from cvs_tui.core.history.store import HistoryStore, default_path

FIX = Path(__file__).parents[1] / "fixtures" / "compare"
KEY = "BS=2,PRECISION=BF16,SL=128"
SCALED = {  # metric -> how it moves with throughput (1: with it, -1: against it)
    "training.tokens_per_sec_per_gpu": 1,
    "training.tokens_per_sec_total": 1,
    "training.tflops_per_sec_per_gpu": 1,
    "training.step_time_p50_ms": -1,
    "training.step_time_p95_ms": -1,
    "training.step_time_mean_ms": -1,
}


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real analyze runs of two fixture logs, into folders (registered in a module-wide database)."""
    tmp = tmp_path_factory.mktemp("analyzed")
    config = write_config(tmp, steps=50, runs=[KEY])
    out = {}
    mp = pytest.MonkeyPatch()
    mp.setenv("CVS_TUI_HISTORY_DB", str(tmp / "first.db"))
    for name in ("same_a1", "other_jax"):
        rc = main(
            ["analyze", str(config), "--logs", str(FIX / f"{name}.log"), "--out", str(tmp / name), "--no-ui"]
        )
        assert rc == 0
        out[name] = tmp / name
    mp.undo()
    return out


def _repeat(src: Path, dst: Path, *, at: float, factor: float) -> Path:
    """A copy of a real run folder: a repeat at time ``at`` with ``factor`` x the source's throughput."""
    shutil.copytree(src, dst)
    doc: dict[str, Any] = json.loads((dst / "results.json").read_text())
    doc["created_at"] = at
    for run in doc["runs"]:
        run["started_at"] = at
        for m in run["metrics"]:
            if m["name"] in SCALED and m["value"] is not None:
                m["value"] *= factor ** SCALED[m["name"]]
    (dst / "results.json").write_text(json.dumps(doc))
    return dst


def _series(src: Path, root: Path, factors: list[float]) -> list[Path]:
    return [_repeat(src, root / f"r{i:02d}", at=1.0e9 + 3600 * i, factor=f) for i, f in enumerate(factors)]


STABLE = [1.0, 1.012, 0.991, 1.004, 0.996, 1.009, 0.988, 1.003, 0.998, 1.006]


def test_analyze_registers_its_run_and_no_history_opts_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, steps=50, runs=[KEY])
    log = str(FIX / "same_a2.log")
    assert main(["analyze", str(config), "--logs", log, "--out", str(tmp_path / "a"), "--no-ui"]) == 0
    assert "history: BS=2,PRECISION=BF16,SL=128 -> group 1" in capsys.readouterr().out
    assert (
        main(["analyze", str(config), "--logs", log, "--out", str(tmp_path / "b"), "--no-ui", "--no-history"])
        == 0
    )
    assert "history:" not in capsys.readouterr().out
    with HistoryStore.open(create=False) as store:  # type: ignore[union-attr]
        assert [Path(r.run_dir).name for r in store.runs()] == ["a"]


def test_database_path_is_the_variable_else_the_xdg_data_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVS_TUI_HISTORY_DB", "/srv/h.db")
    assert default_path() == Path("/srv/h.db")
    monkeypatch.delenv("CVS_TUI_HISTORY_DB")
    monkeypatch.setenv("XDG_DATA_HOME", "/data")
    assert default_path() == Path("/data/cvs-tui/history.db")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", "/home/u")
    assert default_path() == Path("/home/u/.local/share/cvs-tui/history.db")


def test_add_is_idempotent_and_list_shows_the_runs(
    analyzed: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    src = analyzed["same_a1"]
    assert main(["history", "add", str(src)]) == 0
    assert main(["history", "add", str(src), str(src / "results.json")]) == 0
    assert "(updated)" in capsys.readouterr().out
    assert main(["history", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed["runs"]) == 1 and listed["runs"][0]["run"] == KEY
    assert listed["groups"][0]["series"]["gpu"] == "cpu" and listed["groups"][0]["stack"]["JAX"]
    assert main(["history", "show", str(src)]) == 0
    assert "run 1 of 1" in capsys.readouterr().out


def test_changed_stack_starts_a_new_group_and_says_what_changed(
    analyzed: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "add", str(analyzed["same_a1"])]) == 0
    assert main(["history", "add", str(analyzed["other_jax"])]) == 0
    out = capsys.readouterr().out
    assert (
        "-> group 2" in out and "new group, the stack changed against group 1: JAX" in out and "0.4.35" in out
    )


def test_check_flags_a_6_pct_slowdown_within_two_runs_and_nothing_on_stable_runs(
    analyzed: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _series(analyzed["same_a1"], tmp_path, [*STABLE, 0.94, 0.94, 0.94])
    assert main(["history", "add", *map(str, runs)]) == 0
    capsys.readouterr()
    codes = []
    for r in runs:
        codes.append(main(["history", "check", str(r), "--json"]))
        doc = json.loads(capsys.readouterr().out)
        tp = next(m for m in doc["runs"][0]["metrics"] if m["metric"] == "training.tokens_per_sec_per_gpu")
        if r.name == "r00":
            assert tp["verdict"] == "NOT ENOUGH HISTORY" and tp["baseline"] is None
    assert codes[:10] == [0] * 10  # stable: no alarm (the first five without enough history)
    assert 1 in codes[10:12]  # the slowdown: flagged on its first or second run
    assert main(["history", "check", str(runs[11])]) == 1
    text = capsys.readouterr().out
    assert "throughput ↑" in text and "REGRESSED" in text and "overall: REGRESSED" in text
    assert "runs" in text and "baseline from" in text


def test_report_shows_the_trend_and_summary_lists_the_regression(
    analyzed: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _series(analyzed["same_a1"], tmp_path, [*STABLE, 0.85])
    assert main(["history", "add", *map(str, runs[:-1])]) == 0
    assert main(["report", str(runs[-1] / "results.json")]) == 0  # a regression vs history is not a FAIL
    html = (runs[-1] / "report.html").read_text()
    assert 'class="trend"' in html and "vs last 10 runs" in html and "REGRESSED" in html
    assert str(tmp_path) not in html  # no run folder named
    md = (runs[-1] / "summary.md").read_text()
    assert "**Against the run history**" in md and "throughput" in md and "REGRESSED" in md
    assert main(["report", str(runs[-1] / "results.json"), "--no-history"]) == 0
    assert 'class="trend"' not in (runs[-1] / "report.html").read_text()


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "check", "/nonexistent/run"],
        ["history", "add", "/nonexistent/run"],
        ["history", "check", ".", "--last", "0"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cvs-tui: error:")


def test_corrupt_or_foreign_database_is_one_line_naming_the_path(
    analyzed: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as c:
        c.execute("CREATE TABLE t (x)")
    for db in (junk, foreign):
        monkeypatch.setenv("CVS_TUI_HISTORY_DB", str(db))
        assert main(["history", "add", str(analyzed["same_a1"])]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(db) in err[0] and "not a cvs-tui history database" in err[0]
    assert junk.read_bytes().startswith(b"this is not sqlite")  # never overwritten


def test_two_writers_at_once_both_register(analyzed: dict[str, Path], tmp_path: Path) -> None:
    import multiprocessing

    runs = _series(analyzed["same_a1"], tmp_path, [1.0] * 8)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=main, args=(["history", "add", str(r)],)) for r in runs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 8
    with HistoryStore.open(create=False) as store:  # type: ignore[union-attr]
        assert len(store.runs()) == 8 and len(store.groups()) == 1


def test_hosts_flags_a_host_at_fault_unusually_often(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = HistoryStore.open()
    assert store is not None
    with store, store.transaction() as c:
        c.execute(
            "INSERT INTO groups (series, stack, key, label, created_at) VALUES ('{}', '{}', 'k', 'g', 0)"
        )
        for run in range(20):
            c.execute(
                "INSERT INTO runs (run_dir, run_key, group_id, at, registered_at, status, outcome, "
                "complete, metrics) VALUES (?, 'K', 1, ?, 0, 'PASS', 'complete', 1, '{}')",
                (f"/runs/{run}", run),
            )
            for h in range(64):
                lemon = h == 7 and run in (3, 8, 14)
                other = h == 10 + run % 10 and run % 2 == 0
                c.execute(
                    "INSERT INTO run_hosts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (run + 1, f"node{h:02d}", h, int(lemon), 0, int(other), 0, 0),
                )
    assert main(["history", "hosts"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("node07") and "FLAGGED" in out.splitlines()[1]
    assert "64 host(s), 1 flagged" in out


def test_a_live_runs_nodes_are_scored_by_host_and_analyzed_logs_are_not(analyzed: dict[str, Path]) -> None:
    from cvs_tui.core.history.register import _host_rows
    from cvs_tui.core.results import load_results

    results = load_results(analyzed["same_a1"] / "results.json")
    run = results.runs[0]
    assert _host_rows(results, run) == []  # analyze: the "host" is a log file's name
    live = results.model_copy(update={"source": "live", "hosts": ["gpu-a"]})
    node = run.nodes[0].model_copy(update={"host": "gpu-a", "straggler": True})
    live_run = run.model_copy(update={"nodes": [node], "root_cause_node": 0})
    assert _host_rows(live, live_run) == [("gpu-a", 0, 1, 1, 0, 0, 0)]


def test_tui_line_shows_baseline_band_and_verdict(analyzed: dict[str, Path], tmp_path: Path) -> None:
    from cvs_tui.core.history.trend import trend_for
    from cvs_tui.tui.screens.verdicts import history_line

    runs = _series(analyzed["same_a1"], tmp_path, [*STABLE, 0.85])
    assert main(["history", "add", *map(str, runs[:-1])]) == 0
    trend = trend_for(runs[-1])
    assert not trend.error and KEY in trend.runs
    text = history_line(trend.runs[KEY]).plain
    assert text.startswith("history (10 earlier runs): throughput ")
    assert " vs " in text and "[" in text and "REGRESSED" in text and "step time p50" in text


def test_a_run_that_did_not_record_some_facts_joins_the_group_it_agrees_with(
    analyzed: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "add", str(analyzed["same_a1"])]) == 0
    capsys.readouterr()
    lines = (FIX / "same_a1.log").read_text().splitlines(keepends=True)
    log = tmp_path / "node0.log"
    log.write_text("".join(ln for ln in lines if "Jax Version" not in ln and "Jaxlib Version" not in ln))
    config = write_config(tmp_path, steps=50, runs=[KEY])
    assert main(["analyze", str(config), "--logs", str(log), "--out", str(tmp_path / "out"), "--no-ui"]) == 0
    out = capsys.readouterr().out
    assert "-> group 1" in out and "new group" not in out
