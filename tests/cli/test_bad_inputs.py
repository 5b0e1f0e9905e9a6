"""Audit 2 reproductions for bad inputs and output writes: each one is a one-line error with exit 2, a
FAIL, or an escaped value, never a traceback or a silent PASS (#4, #8, #18, #19, #20, #22, #25)."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, load_local, sample_results, synthetic_node, write_config

from cvs_tui.cli.main import main
from cvs_tui.core.atomic import write_atomic
from cvs_tui.core.events import RunOutcome, StepEvent
from cvs_tui.core.jsonsafe import JsonInputError, loads_strict
from cvs_tui.core.judge.outcome import decide_outcome
from cvs_tui.core.report import write_reports
from cvs_tui.core.results import load_results, write_results

KEY = "BS=2,PRECISION=BF16,SL=128"
LOG = FIXTURES / "single_20steps.log"


def _err_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("cvs-tui: error:")]
    assert lines, err
    return lines[0]


# -- #4 ------------------------------------------------------------------------------------------------
def test_run_key_in_the_chart_label_is_escaped(tmp_path: Path) -> None:
    res = sample_results(load_local(tmp_path, steps=20))
    res.runs[0].key = 'x"><script>alert(document.domain)</script>'
    text = write_reports(res, tmp_path / "out")["html"].read_text()
    assert "<script>alert" not in text
    assert 'aria-label="loss chart x&quot;&gt;&lt;script&gt;' in text


# -- #8 ------------------------------------------------------------------------------------------------
def test_a_short_node_after_a_stepless_node_fails_the_run() -> None:
    stepless: list = []
    full = synthetic_node(20)
    short = [e for e in synthetic_node(20) if not (isinstance(e, StepEvent) and e.step > 9)]
    out, reason, root = decide_outcome([stepless, full, short], 20)
    assert out is RunOutcome.FAILED and root == 2 and "ends at step 9" in reason
    # rank-0-only logs stay fine
    assert decide_outcome([full, stepless, stepless], 20)[0] is RunOutcome.COMPLETE


# -- #18 / #19 / #20: strict JSON --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"a": NaN}', "NaN"),
        ('{"a": -Infinity}', "-Infinity"),
        ('{"a": 1e400}', "1e400"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": ' + "9" * 5000 + "}", "4300"),
        ('{"a":' + "[" * 2000 + "]" * 2000 + "}", "recursion"),
        ('{"a":' + "[" * 100 + "]" * 100 + "}", "nesting deeper than 64"),
    ],
)
def test_strict_json_refuses(text: str, words: str) -> None:
    with pytest.raises(JsonInputError, match=words.replace("[", r"\[")):
        loads_strict(text)


def test_strict_json_keeps_ordinary_documents() -> None:
    assert loads_strict('{"a": [1, 2.5, {"b": null}], "c": "NaN"}') == {
        "a": [1, 2.5, {"b": None}],
        "c": "NaN",
    }
    assert loads_strict('{"a": NaN}', finite=False)["a"] != 0


def test_non_finite_and_duplicate_config_values_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(
        tmp_path, runs=[KEY], thresholds={KEY: {"training.final_loss": {"kind": "max", "value": 7}}}
    )
    thr = tmp_path / json.loads(cfg.read_text())["threshold_json"]
    thr.write_text(thr.read_text().replace('"value": 7}', '"value": 1e400}'))
    assert main(["config", "validate", str(cfg)]) == 2
    assert "1e400" in _err_line(capsys)
    text = cfg.read_text()
    cfg.write_text(text[:-1] + ', "gpu_name": "mi300x"}')
    assert main(["config", "validate", str(cfg)]) == 2
    assert "duplicate key 'gpu_name'" in _err_line(capsys)
    cfg.write_text('{"a":' + "[" * 2000 + "]" * 2000 + "}")
    assert main(["config", "validate", str(cfg)]) == 2
    _err_line(capsys)


def test_bad_results_files_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' + "[" * 2000 + "]" * 2000 + "}")
    assert main(["report", str(deep)]) == 2
    _err_line(capsys)
    for when in (-1e12, 1e300):
        res = sample_results(load_local(tmp_path, steps=20))
        res.created_at = when
        p = write_results(res, tmp_path / f"r{when}" / "results.json")
        assert main(["report", str(p)]) in (0, 1)
        assert "invalid time" in (p.parent / "report.html").read_text()
        assert "Traceback" not in capsys.readouterr().err


def test_config_copy_destinations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "cpu_jaxmaxtext_tiny-llama_single"
    assert main(["config", "copy", name, "/dev/null"]) == 2
    assert "/dev/null: exists and is not a folder" in _err_line(capsys)
    dest = tmp_path / f"{name}_threshold.json"
    assert main(["config", "copy", name, str(dest)]) == 2
    assert "threshold file's name" in _err_line(capsys)
    assert not dest.exists()


def test_output_paths_that_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, runs=[KEY])
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["analyze", str(cfg), "--logs", str(LOG), "--out", str(afile / "sub"), "--no-ui"]) == 2
    assert "afile/sub" in _err_line(capsys)
    good = tmp_path / "good"
    main(["analyze", str(cfg), "--logs", str(LOG), "--out", str(good), "--no-ui"])
    capsys.readouterr()
    rc = main(
        ["compare", str(good / "results.json"), str(LOG), "--config", str(cfg), "--html", str(tmp_path)]
    )
    assert rc == 2
    assert f"{tmp_path}: is a folder" in _err_line(capsys)


# -- #22 -----------------------------------------------------------------------------------------------
def test_logs_must_be_regular_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, runs=[KEY])
    fifo = tmp_path / "node0.fifo"
    os.mkfifo(fifo)
    for odd in ("/dev/zero", str(fifo)):
        assert main(["analyze", str(cfg), "--logs", odd, "--out", str(tmp_path / "o"), "--no-ui"]) == 2
        assert f"{odd} is not a regular file" in _err_line(capsys)


# -- #25 -----------------------------------------------------------------------------------------------
def test_atomic_write_syncs_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The order of fsync and rename is the point here, so the two calls are observed (a spy, not a stub:
    both still run)."""
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    res = sample_results(load_local(tmp_path, steps=20))
    write_reports(res, tmp_path / "out")
    assert calls[:2] == ["fsync", "replace"] and calls.count("replace") == 3
    assert ET.parse(tmp_path / "out/junit.xml").getroot() is not None
    assert write_atomic(tmp_path / "f.txt", "abc").read_text() == "abc"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert load_results(write_results(res, tmp_path / "r.json")).runs[0].key == res.runs[0].key


def test_loss_curve_sample_every_below_1_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, runs=[KEY], mutate=lambda d: d["loss_curve"].update(sample_every=-3))
    assert main(["config", "validate", str(cfg)]) == 2
    assert "loss_curve.sample_every" in _err_line(capsys)


@pytest.mark.parametrize("text", ["a: 9999-99-99\n", "0: 0000-00-00\n", "a: " + "9" * 5000 + "\n"])
def test_card_yaml_values_python_cannot_build_are_problems(text: str) -> None:
    from cvs_tui.core.card.build import validate_card_text

    problems = validate_card_text(text, source="card.yaml")
    assert problems and problems[0].startswith("card.yaml: ")


def test_a_threshold_name_the_os_refuses_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, runs=[KEY])
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "threshold_json": "9" * 5000 + ".json"}))
    assert main(["config", "validate", str(cfg)]) == 2
    assert "threshold_json" in _err_line(capsys)


def test_a_key_path_the_os_refuses_is_a_problem(tmp_path: Path) -> None:
    from cvs_tui.core.cluster import load_cluster
    from cvs_tui.core.errors import UserError

    cl = tmp_path / "cluster.json"
    cl.write_text(json.dumps({"priv_key_file": "9" * 5000, "node_dict": {"10.0.0.5": {}}}))
    with pytest.raises(UserError, match="priv_key_file"):
        load_cluster(cl)


def test_a_newline_in_a_key_stays_inside_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, runs=[KEY])
    (tmp_path / json.loads(cfg.read_text())["threshold_json"]).write_text('{"\\n\\u001b[2J": null}')
    assert main(["config", "validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and all(ln.startswith("cvs-tui: ") for ln in err.splitlines())


def test_extreme_loss_curve_points_leave_the_report_without_a_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    res = sample_results(load_local(tmp_path, steps=20))
    assert res.runs[0].loss_curve is not None
    res.runs[0].loss_curve.points = [(0, 1e308), (10, -1e308)]
    res.runs[0].nodes[0].steps[0].loss = 1e308
    p = write_results(res, tmp_path / "r" / "results.json")
    assert main(["report", str(p)]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err
    assert (p.parent / "report.html").is_file()
