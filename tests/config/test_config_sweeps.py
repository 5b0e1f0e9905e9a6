"""Sweep keys -> MaxText overrides, the sweep's own overrides, and the `runs` selection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _config_samples import BF16, FP8, write_config
from hypothesis import given
from hypothesis import strategies as st

from cvs_tui.core.config.loader import load_config
from cvs_tui.core.config.sweeps import fp8_flavor, parse_sweep_key
from cvs_tui.core.config.thresholds import GATED_METRICS
from cvs_tui.core.errors import UserError


def load_problems(path: Path) -> list[str]:
    with pytest.raises(UserError) as exc:
        load_config(path)
    return exc.value.problems


@pytest.mark.parametrize(
    ("key", "gpu", "expected"),
    [
        (
            "BS=3,PRECISION=BF16,SL=8192",
            "mi3xx",
            {"per_device_batch_size": 3, "quantization": "", "max_target_length": 8192},
        ),
        (
            "BS=4,PRECISION=FP8,SL=4096",
            "mi3xx",
            {"per_device_batch_size": 4, "quantization": "nanoo_fp8", "max_target_length": 4096},
        ),
        (
            "BS=4,PRECISION=FP8,SL=4096",
            "mi325x",
            {"per_device_batch_size": 4, "quantization": "nanoo_fp8", "max_target_length": 4096},
        ),
        (
            "BS=6,PRECISION=FP8,SL=8192",
            "mi35x",
            {"per_device_batch_size": 6, "quantization": "fp8", "max_target_length": 8192},
        ),
        ("BS=6,PRECISION=FP8", "MI355X", {"per_device_batch_size": 6, "quantization": "fp8"}),
        ("bs=2, precision=bf16", "mi3xx", {"per_device_batch_size": 2, "quantization": ""}),
        ("baseline", "mi3xx", {}),
    ],
)
def test_parse_sweep_key(key: str, gpu: str, expected: dict[str, Any]) -> None:
    assert parse_sweep_key(key, gpu) == expected


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("BS=3,PRECISON=BF16", "unknown token 'PRECISON' (did you mean 'PRECISION'?)"),
        ("BS=0", "BS must be a positive integer, got '0'"),
        ("BS=x", "BS must be a positive integer"),
        ("SL=-1", "SL must be a positive integer"),
        ("PRECISION=FP16", "PRECISION must be BF16 or FP8, got 'FP16'"),
        ("BS=1,BS=2", "appears twice"),
        ("BS=1,BF16", "not NAME=VALUE"),
        ("BS=1,", "not NAME=VALUE"),
    ],
)
def test_bad_sweep_keys(key: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=None) as exc:
        parse_sweep_key(key, "mi3xx")
    assert fragment in str(exc.value)


def test_fp8_flavor() -> None:
    assert fp8_flavor("mi35x") == "fp8" and fp8_flavor("mi355x") == "fp8"
    assert fp8_flavor("mi300x") == "nanoo_fp8" and fp8_flavor("mi3xx") == "nanoo_fp8"


def test_sweep_overrides_win_over_the_parsed_key(tmp_path: Path) -> None:
    path = write_config(
        tmp_path, lambda c: c["sweeps"][BF16].update(per_device_batch_size=5, remat_policy="full")
    )
    loaded = load_config(path)
    bf16 = loaded.runs[0]
    assert bf16.key == BF16 and bf16.slug == "BS_3_PRECISION_BF16_SL_8192"
    assert bf16.maxtext_config["per_device_batch_size"] == 5  # the sweep's {} wins over BS=3
    assert bf16.maxtext_config["remat_policy"] == "full"
    assert bf16.maxtext_config["max_target_length"] == 8192  # parsed from the key over maxtext_config's 2048
    assert bf16.steps == 30
    fp8 = loaded.runs[1]
    assert fp8.steps == 10 and fp8.maxtext_config["steps"] == 10
    assert fp8.maxtext_config["quantization"] == "nanoo_fp8"
    assert "_comment" not in fp8.maxtext_config


def test_bad_sweep_key_in_a_config_names_the_sweep(tmp_path: Path) -> None:
    def bad(cfg: dict[str, Any]) -> None:
        cfg["sweeps"]["BS=3,PRECISION=FP16,SL=8192"] = {}

    (line,) = load_problems(write_config(tmp_path, bad))
    assert line.startswith('sweeps["BS=3,PRECISION=FP16,SL=8192"]: ') and "FP16" in line


def test_runs_select_and_order(tmp_path: Path) -> None:
    loaded = load_config(write_config(tmp_path, lambda c: c.update(runs=[FP8])))
    assert [r.key for r in loaded.runs] == [FP8]
    loaded = load_config(write_config(tmp_path, lambda c: c.update(runs=[FP8, BF16])))
    assert [r.key for r in loaded.runs] == [FP8, BF16]


def test_runs_absent_means_all_in_sweeps_order(tmp_path: Path) -> None:
    loaded = load_config(write_config(tmp_path, lambda c: c.pop("runs")))
    assert [r.key for r in loaded.runs] == [BF16, FP8]


def test_unknown_and_duplicate_runs_are_errors(tmp_path: Path) -> None:
    lines = load_problems(
        write_config(tmp_path, lambda c: c.update(runs=[BF16, "BS=3,PRECISION=BF16,SL=819", BF16]))
    )
    assert lines[0].startswith("runs[1]: unknown sweep key 'BS=3,PRECISION=BF16,SL=819'")
    assert f"did you mean '{BF16}'" in lines[0]
    assert lines[1].startswith("runs[2]: ") and "twice" in lines[1]


def test_empty_runs_is_an_error(tmp_path: Path) -> None:
    (line,) = load_problems(write_config(tmp_path, lambda c: c.update(runs=[])))
    assert line.startswith("runs: ")


def test_no_sweeps_means_one_default_run(tmp_path: Path) -> None:
    def nosweeps(cfg: dict[str, Any]) -> None:
        cfg.pop("sweeps")
        cfg.pop("runs")

    thr = {"default": {m: {"kind": "info", "value": 1} for m in GATED_METRICS}}
    loaded = load_config(write_config(tmp_path, nosweeps, thresholds=thr))
    (run,) = loaded.runs
    assert run.key == "default" and run.maxtext_config["per_device_batch_size"] == 1 and run.steps == 30


def test_steps_must_be_a_positive_integer(tmp_path: Path) -> None:
    (line,) = load_problems(write_config(tmp_path, lambda c: c["sweeps"][FP8].update(steps=0)))
    assert line.startswith(f'sweeps["{FP8}"].steps: ')

    def nosteps(cfg: dict[str, Any]) -> None:
        cfg["train_params"]["maxtext_config"].pop("steps")
        cfg["train_params"]["maxtext_config"]["stpes"] = 3
        cfg["sweeps"][FP8].pop("steps")

    lines = load_problems(write_config(tmp_path, nosteps))
    assert lines == [lines[0]] and lines[0].startswith(
        "train_params.maxtext_config.steps: required key is missing"
    )
    assert "'stpes' is set" in lines[0]


def test_override_typo_is_a_warning(tmp_path: Path) -> None:
    loaded = load_config(write_config(tmp_path, lambda c: c["sweeps"][BF16].update(remat_policy="full")))
    assert loaded.warnings == []  # a new MaxText key is fine
    loaded = load_config(write_config(tmp_path, lambda c: c["sweeps"][BF16].update(dataset_typ="hf")))
    (w,) = loaded.warnings
    assert w.startswith(f'sweeps["{BF16}"].dataset_typ: ') and "did you mean 'dataset_type'" in w


def test_slug_collision_is_an_error(tmp_path: Path) -> None:
    def collide(cfg: dict[str, Any]) -> None:
        cfg["sweeps"]["BS=3, PRECISION=BF16, SL=8192"] = {}

    (line,) = load_problems(write_config(tmp_path, collide))
    assert "same folder name" in line


@given(
    bs=st.integers(min_value=1, max_value=10**6),
    sl=st.integers(min_value=1, max_value=10**7),
    precision=st.sampled_from(["BF16", "FP8", "bf16", "fp8"]),
    gpu=st.sampled_from(["mi300x", "mi325x", "mi3xx", "mi35x", "mi355x", "MI350X"]),
    order=st.permutations(["BS", "PRECISION", "SL"]),
)
def test_any_well_formed_key_parses(bs: int, sl: int, precision: str, gpu: str, order: list[str]) -> None:
    values = {"BS": str(bs), "PRECISION": precision, "SL": str(sl)}
    key = ",".join(f"{k}={values[k]}" for k in order)
    parsed = parse_sweep_key(key, gpu)
    expected_q = (
        "" if precision.upper() == "BF16" else ("fp8" if gpu.lower().startswith("mi35") else "nanoo_fp8")
    )
    assert parsed == {"per_device_batch_size": bs, "max_target_length": sl, "quantization": expected_q}
