"""Audit 3 L11 (RD02, RD03): `card` of a results.json whose run key gives an unusable workload (`BS=0`) or
whose time stamps are no times (`created_at: Infinity`) says so in one line naming the file and the
field, exit 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_card import KEY, _single

from cvs_tui.cli.main import main


@pytest.fixture(autouse=True)
def _maxtext_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/opt/maxtext-venv/bin/python")


def _card(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["card", str(path), "--accelerator", "MI300X", "--out", str(path.parent / "card.yaml")])
    err = capsys.readouterr().err
    return rc, err


def test_rd02_a_run_key_with_batch_size_zero_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _single(tmp_path)
    doc = json.loads(src.read_text())
    run = doc["runs"][0]
    doc["runs"] = [dict(run, key=KEY.replace("BS=2", f"BS={i}"), slug=f"s{i}") for i in (0, 1)]
    bad = tmp_path / "bs0.json"
    bad.write_text(json.dumps(doc))
    rc, err = _card(bad, capsys)
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(bad) in err and "per_device_batch_size 0" in err and "BS=0" in err


@pytest.mark.parametrize(
    ("field", "value"),
    [("created_at", float("inf")), ("created_at", float("nan")), ("created_at", -1e300), ("ended_at", 1e300)],
)
def test_rd03_a_time_stamp_that_is_no_time_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: float
) -> None:
    src = _single(tmp_path)
    doc = json.loads(src.read_text())
    if field == "created_at":
        doc["created_at"] = value
        for r in doc["runs"]:
            r["ended_at"] = r["started_at"] = None
    else:
        doc["runs"][0][field] = value
    bad = tmp_path / "time.json"
    bad.write_text(json.dumps(doc, allow_nan=True))
    rc, err = _card(bad, capsys)
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(bad) in err and field in err and "not a time" in err
