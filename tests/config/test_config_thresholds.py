"""Threshold files: the seven kinds, spec errors, and coverage of the sweeps (error vs warning)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _config_samples import BF16, FP8, write_config

from cvs_tui.core.config.blocks import ThresholdKind
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError

THR = "sample_threshold.json"


def load_problems(path: Path) -> list[str]:
    with pytest.raises(UserError) as exc:
        load_config(path)
    return exc.value.problems


def test_all_seven_kinds_load(tmp_path: Path) -> None:
    def kinds(thr: dict[str, Any]) -> None:
        thr[BF16] = {
            "training.tflops_per_sec_per_gpu": {"kind": "min", "value": 1},
            "training.final_loss": {"kind": "max", "value": 15},
            "training.loss_decreased": {"kind": "min", "value": 1},
            "training.step_time_p95_ms": {"kind": "max_ms", "value": 900},
            "training.tokens_per_sec_per_gpu": {"kind": "min_tok_s", "value": 1000},
            "training.step_time_seconds": {"kind": "within", "value": 2.0, "tolerance_pct": 10},
            "training.tokens_per_sec_total": {
                "kind": "min_ratio",
                "value": 0.9,
                "reference": "training.eval_loss",
            },
            "training.eval_loss": {"kind": "info", "value": 100, "_why": "calibrate later"},
        }

    loaded = load_config(write_config(tmp_path, mutate_thresholds=kinds))
    cell = loaded.thresholds[BF16]
    assert {s.kind for s in cell.values()} == set(ThresholdKind)
    assert cell["training.step_time_seconds"].tolerance_pct == 10
    assert cell["training.tokens_per_sec_total"].reference == "training.eval_loss"
    assert "_comment" not in loaded.thresholds


@pytest.mark.parametrize(
    ("spec", "path_end", "fragment"),
    [
        ({"kind": "mn", "value": 1}, ".kind", "unknown threshold kind 'mn' (did you mean 'min'?)"),
        ({"kind": "within", "value": 1}, "", "tolerance_pct"),
        ({"kind": "min_ratio", "value": 1}, "", "reference"),
        ({"kind": "max"}, ".value", "required key is missing"),
        ({"kind": "max", "value": "high"}, ".value", "number"),
        ({"kind": "max", "value": 1, "tolerance": 2}, ".tolerance", "did you mean 'tolerance_pct'"),
        ("max 15", "", "a spec must be an object"),
    ],
)
def test_bad_specs_are_errors(tmp_path: Path, spec: Any, path_end: str, fragment: str) -> None:
    path = write_config(tmp_path, mutate_thresholds=lambda t: t[BF16].update({"training.final_loss": spec}))
    (line,) = load_problems(path)
    head = f'{THR}: ["{BF16}"]["training.final_loss"]{path_end}'
    assert line.startswith(head + ": "), line
    assert fragment in line


def test_unmatched_cells_and_sweeps_are_errors_when_enforced(tmp_path: Path) -> None:
    def mismatch(thr: dict[str, Any]) -> None:
        thr["BS=3,PRECISION=FP8,SL=819"] = thr.pop(FP8)

    lines = load_problems(write_config(tmp_path, mutate_thresholds=mismatch))
    assert len(lines) == 2
    assert lines[0].startswith(f'sweeps["{FP8}"]: sweep has no cell in {THR}')
    assert lines[1].startswith(f'{THR}: ["BS=3,PRECISION=FP8,SL=819"]: cell matches no sweep key')
    assert f"did you mean '{FP8}'" in lines[1]


def test_unmatched_cells_are_warnings_when_not_enforced(tmp_path: Path) -> None:
    def mismatch(thr: dict[str, Any]) -> None:
        thr["BS=3,PRECISION=FP8,SL=819"] = thr.pop(FP8)

    path = write_config(tmp_path, lambda c: c.update(enforce_thresholds=False), mutate_thresholds=mismatch)
    loaded = load_config(path)
    assert len(loaded.warnings) == 2 and all("record-only" in w for w in loaded.warnings)
    assert FP8 not in loaded.thresholds


def test_unselected_sweep_needs_no_cell(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda c: c.update(runs=[BF16]), mutate_thresholds=lambda t: t.pop(FP8))
    assert load_config(path).warnings == []


def test_unknown_metric_is_a_warning(tmp_path: Path) -> None:
    def typo(thr: dict[str, Any]) -> None:
        thr[BF16]["training.final_los"] = {"kind": "max", "value": 1}

    (w,) = load_config(write_config(tmp_path, mutate_thresholds=typo)).warnings
    assert "training.final_los" in w and "did you mean 'training.final_loss'" in w


def test_cell_that_is_not_an_object(tmp_path: Path) -> None:
    (line,) = load_problems(write_config(tmp_path, mutate_thresholds=lambda t: t.update({BF16: [1]})))
    assert line.startswith(f'{THR}: ["{BF16}"]: ')


def test_invalid_threshold_json(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    (tmp_path / THR).write_text("{nope")
    (line,) = load_problems(path)
    assert line.startswith(f"{tmp_path / THR}: invalid JSON")
