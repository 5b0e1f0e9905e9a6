"""Audit 2 #18/#23 for `attach`: unreadable events.jsonl lines are skipped and counted, never a traceback,
and a folder whose suite never ended exits 1 (a dead run is not a pass)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cvs_tui.cli.main import main
from cvs_tui.core.event_codec import event_to_dict
from cvs_tui.core.events import StageEvent, StageState, SuiteEndEvent


def _folder(tmp_path: Path, *, ended: bool) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    good = event_to_dict(StageEvent("preflight", StageState.PASSED, at=1.0))
    bad_enum = {**good, "state": "exploded"}
    bad_type = {**good, "at": {"x": 1}}
    lines = [
        json.dumps(good).encode(),
        json.dumps(bad_enum).encode(),
        json.dumps(bad_type).encode(),
        b'{"kind": "StageEvent", "stage": "\xff\xfe"}',
        b"[" * 5000 + b"]" * 5000,
        b"not json",
    ]
    if ended:
        lines.append(json.dumps(event_to_dict(SuiteEndEvent(passed=True, at=2.0))).encode())
    (d / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return d


def test_bad_lines_are_skipped_and_counted_and_no_end_is_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _folder(tmp_path, ended=False)
    assert main(["attach", str(d), "--no-ui", "--no-follow"]) == 1
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    assert "skipped 5 unreadable line(s)" in cap.err and "has not ended" in cap.err
    assert "preflight" in cap.out


def test_an_ended_passing_suite_still_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _folder(tmp_path, ended=True)
    assert main(["attach", str(d), "--no-ui", "--no-follow"]) == 0


def test_compare_against_an_empty_candidate_is_not_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from _analysis_samples import FIXTURES, write_config

    cfg = write_config(tmp_path, runs=["BS=2,PRECISION=BF16,SL=128"])
    good = tmp_path / "good"
    main(["analyze", str(cfg), "--logs", str(FIXTURES / "single_20steps.log"), "--out", str(good), "--no-ui"])
    garbage = tmp_path / "garbage.log"
    garbage.write_text("not a training log\n")
    base = str(good / "results.json")
    assert main(["compare", base, str(garbage), "--config", str(cfg)]) == 1
    assert "logged no training step" in capsys.readouterr().err
    assert main(["compare", base, str(garbage), "--config", str(cfg), "--allow-empty"]) == 0


def test_writer_running_reads_the_run_lock(tmp_path: Path) -> None:
    """The lock a live run holds (the suite's own) is what tells `attach` that a run it leaves goes on."""
    from cvs_tui.core.run_folder import RunFolder
    from cvs_tui.core.runner.suite import _lock_run_folder

    d = tmp_path / "run"
    d.mkdir()
    assert RunFolder(d).writer_running() is None  # no lock ever taken (analyze --follow, older folders)
    fh = _lock_run_folder(d)
    try:
        assert RunFolder(d).writer_running() is True
    finally:
        fh.close()
    assert RunFolder(d).writer_running() is False  # the writer is gone: a run without an end died
