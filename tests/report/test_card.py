"""`cvs-tui card` on results made from the real MaxText CPU logs (tests/fixtures/maxtext): the card builds,
validates, maps each run to the right item, and never verifies what did not pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from _analysis_samples import FIXTURES, LOCAL_2PROC, write_config

from cvs_tui.cli.main import main
from cvs_tui.core.card import build_card, card_to_yaml, load_card_source, validate_card_text
from cvs_tui.core.card.schema import PERFORMANCE_DISCLAIMER, load_card_yaml
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.results import write_results
from cvs_tui.core.sources.offline import analyze_paths

KEY = "BS=2,PRECISION=BF16,SL=128"


@pytest.fixture(autouse=True)
def _maxtext_python(monkeypatch: pytest.MonkeyPatch) -> None:
    # the configs name the trainer's interpreter with {env.CVS_TUI_MAXTEXT_PYTHON}; nothing is launched here
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/opt/maxtext-venv/bin/python")


def _single(tmp: Path, log: str = "single_20steps.log", *, gpu_name: str | None = None) -> Path:
    """results.json of one real single-process sweep run, analyzed with the local config."""
    d = tmp / f"single-{log}-{gpu_name}"
    d.mkdir()

    def mutate(doc: dict) -> None:
        if gpu_name:
            doc["gpu_name"] = gpu_name

    cfg = write_config(d, steps=20, runs=[KEY], mutate=mutate)
    res = analyze_paths(load_config(cfg), [FIXTURES / log])
    return write_results(res, d / "results.json")


def _resume_folder(tmp: Path) -> Path:
    """A run folder holding the real checkpoint-resume logs (phase 1, phase 2, reference) and its results."""
    d = tmp / "resume"
    d.mkdir()
    cfg = write_config(d, steps=20, runs=[KEY])
    for sub, src in [
        ("CKPT_1", "ckpt_phase1.log"),
        ("CKPT_2", "ckpt_phase2.log"),
        ("CKPT_REF", "ckpt_reference.log"),
    ]:
        (d / "logs" / sub).mkdir(parents=True)
        shutil.copy(FIXTURES / src, d / "logs" / sub / "node0.log")
    res = analyze_paths(load_config(cfg), [d])
    write_results(res, d / "results.json")
    return d


def _twoproc(tmp: Path) -> Path:
    d = tmp / "twoproc"
    d.mkdir()
    cfg = write_config(d, source=LOCAL_2PROC, steps=20, runs=[KEY])
    logs = [FIXTURES / "twoproc_node0.log", FIXTURES / "twoproc_node1.log"]
    return write_results(analyze_paths(load_config(cfg), logs), d / "results.json")


def test_card_from_real_runs_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    single, resume = _single(tmp_path), _resume_folder(tmp_path)
    out = tmp_path / "card.yaml"
    assert main(["card", str(single), str(resume), "--out", str(out)]) == 0, capsys.readouterr()
    text = out.read_text()
    data = load_card_yaml(text)
    assert list(data)[:3] == ["card_format", "title", "summary"] and list(data)[3] == "verification_index"
    perf = data["items"]["pretrain_performance"]["CPU"]
    assert perf["status"] == "verified"
    # the local config computes in float32 (no quantization, dtype float32): the sweep key's "BF16" is a label
    bf16 = perf["variants"]["fp32"]
    assert bf16["workload"] == {
        "model": "tiny-llama",
        "nodes": 1,
        "gpus_per_node": 1,
        "num_gpus": 1,
        "per_device_batch_size": 2,
        "global_batch_size": 2,
        "max_target_length": 128,
        "steps": 20,
        "precision": "fp32",
    }
    assert set(bf16["metrics"]) == {
        "tflops_per_sec_per_gpu",
        "tokens_per_sec_per_gpu",
        "tokens_per_sec_total",
        "step_time_p50_ms",
        "final_loss",
        "stall_count",
        "stall_seconds",
        "longest_stall_seconds",
        "goodput_pct",
    }
    assert bf16["metrics"]["final_loss"] == pytest.approx(7.188, abs=5e-4)  # full precision (metrics file)
    # a published record keeps 4 significant digits, not the raw float
    digits = [str(v).removesuffix(".0").replace(".", "").lstrip("0") for v in bf16["metrics"].values()]
    assert all(len(d) <= 4 for d in digits), bf16["metrics"]
    assert bf16["metrics"]["stall_count"] == 0 and bf16["metrics"]["goodput_pct"] > 0
    assert bf16["window"]["first_step"] == 3 and bf16["window"]["last_step"] == 19
    assert "loss_curve_slope < 0" in bf16["expected_result"]
    ck = data["items"]["checkpoint_resume"]["CPU"]
    assert ck["status"] == "verified"
    assert ck["resume"] == {"checkpoint_step": 5, "first_resumed_step": 6, "last_step": 11}
    assert ck["resume_comparison"]["sentinel_steps"] == [6, 11] and ck["resume_comparison"]["sentinels_match"]
    assert data["verification_index"] == {
        "training": {"CPU": {"verified": ["checkpoint_resume"]}},
        "performance": {"CPU": "verified"},
    }
    assert "pretrain_performance.CPU" in data["summary"]
    assert "&" not in text and "*" not in text.replace("x |reference|", "")  # no anchors or aliases
    assert main(["card", "validate", str(out)]) == 0
    assert "valid" in capsys.readouterr().out


def test_card_to_stdout_and_smoke_is_never_an_item(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "rf"
    d.mkdir()
    cfg = write_config(d, steps=20, runs=[KEY])
    for sub, src in [("SMOKE", "single_20steps.log"), ("BS_2_PRECISION_BF16_SL_128", "single_20steps.log")]:
        (d / "logs" / sub).mkdir(parents=True)
        shutil.copy(FIXTURES / src, d / "logs" / sub / "node0.log")
    res = analyze_paths(load_config(cfg), [d])
    assert any(r.kind == "smoke" for r in res.runs)
    write_results(res, d / "results.json")
    capsys.readouterr()
    assert main(["card", str(d)]) == 0
    text = capsys.readouterr().out
    assert "smoke" not in yaml.safe_load(text)["items"]["pretrain_performance"]["CPU"]["variants"]
    assert list(yaml.safe_load(text)["items"]["pretrain_performance"]["CPU"]["variants"]) == ["fp32"]
    assert "SMOKE" not in text


def test_smoke_only_results_make_no_card(tmp_path: Path) -> None:
    d = tmp_path / "rf"
    (d / "logs" / "SMOKE").mkdir(parents=True)
    shutil.copy(FIXTURES / "single_20steps.log", d / "logs" / "SMOKE" / "node0.log")
    cfg = write_config(tmp_path, steps=20, runs=[KEY])
    write_results(analyze_paths(load_config(cfg), [d]), d / "results.json")
    with pytest.raises(UserError, match="smoke alone is a gate"):
        build_card([load_card_source(d)])


def test_failed_run_is_unverified_without_a_date(tmp_path: Path) -> None:
    card = build_card([load_card_source(_single(tmp_path, "nan_lr1e6.log"))])
    leaf = card.items.pretrain_performance["CPU"]  # type: ignore[index]
    v = leaf.variants["bf16"]  # no config given: the sweep key's label is the only precision known
    assert leaf.status == "unverified" and v.status == "unverified"
    assert v.last_verified is None and v.metrics is not None and v.metrics.final_loss is None
    assert "run outcome failed" in (v.result or "") and "final_loss" in (v.result or "")
    assert card.verification_index.performance == {"CPU": "unverified"}
    assert validate_card_text(card_to_yaml(card)) == []


def test_weak_scaling_from_one_and_two_process_runs(tmp_path: Path) -> None:
    card = build_card([load_card_source(_single(tmp_path)), load_card_source(_twoproc(tmp_path))])
    leaf = card.items.pretrain_weak_scaling["CPU"]  # type: ignore[index]
    assert [p.num_gpus for p in leaf.points] == [1, 2]
    assert [p.global_batch_size for p in leaf.points] == [2, 4]
    assert [p.workload.nodes for p in leaf.points] == [1, 2]
    assert leaf.status == "verified" and leaf.precision == "bf16"
    perf = card.items.pretrain_performance["CPU"]  # type: ignore[index]
    assert sorted(perf.variants) == ["bf16_bs2_sl128_n1", "bf16_bs2_sl128_n2"]
    assert card.verification_index.weak_scaling == {"CPU": "verified"}
    text = card_to_yaml(card)
    assert list(load_card_yaml(text)["items"]) == ["pretrain_performance", "pretrain_weak_scaling"]
    assert "efficiency" not in text.replace("Derive aggregate throughput and efficiency", "")
    assert validate_card_text(text) == []


def test_one_run_size_makes_no_weak_scaling(tmp_path: Path) -> None:
    card = build_card([load_card_source(_single(tmp_path))])
    assert card.items.pretrain_weak_scaling is None and card.verification_index.weak_scaling is None


def test_resume_without_reference_is_unverified(tmp_path: Path) -> None:
    d = _resume_folder(tmp_path)
    data = json.loads((d / "results.json").read_text())
    data["runs"] = [r for r in data["runs"] if r["kind"] != "ckpt_reference"]
    (d / "results.json").write_text(json.dumps(data))
    card = build_card([load_card_source(d)])
    leaf = card.items.checkpoint_resume["CPU"]  # type: ignore[index]
    assert leaf.status == "unverified" and "no uninterrupted reference" in (leaf.result or "")
    assert card.summary.startswith(PERFORMANCE_DISCLAIMER)
    assert validate_card_text(card_to_yaml(card)) == []


def test_family_gpu_name_needs_accelerator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = _single(tmp_path, gpu_name="mi3xx")
    assert main(["card", str(res)]) == 2
    err = capsys.readouterr().err
    assert "gpu_name 'mi3xx'" in err and "--accelerator" in err
    assert main(["card", str(res), "--accelerator", "mi300-cluster7"]) == 2
    assert "not an allowlisted public accelerator" in capsys.readouterr().err
    out = tmp_path / "c.yaml"
    assert main(["card", str(res), "--accelerator", "mi325x", "--out", str(out)]) == 0
    data = load_card_yaml(out.read_text())
    assert list(data["items"]["pretrain_performance"]) == ["MI325X"]


def test_card_with_private_image_is_not_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = _single(tmp_path)
    out = tmp_path / "c.yaml"
    code = main(["card", str(res), "--image", "registry.corp.example.com/team/jax:1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert "registry reference" in err and "corp.example" not in err
    assert main(["card", str(res), "--image", "rocm/jax-training:maxtext-v26.4", "--out", str(out)]) == 0
    assert load_card_yaml(out.read_text())["verification_environment"]["base_container"] == (
        "rocm/jax-training:maxtext-v26.4"
    )


def test_different_software_stacks_are_refused(tmp_path: Path) -> None:
    a = _single(tmp_path)
    b = _twoproc(tmp_path)
    data = json.loads(b.read_text())
    for r in data["runs"]:
        r["environment"]["jax"] = "0.8.1"
    b.write_text(json.dumps(data))
    with pytest.raises(UserError, match="different software stacks"):
        build_card([load_card_source(a), load_card_source(b)])


def test_card_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["card", str(tmp_path / "nope.json")]) == 2
    assert "no such results file" in capsys.readouterr().err
    assert main(["card", str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err
    assert main(["card", "validate", str(tmp_path / "missing.yaml")]) == 2
    assert "no such card file" in capsys.readouterr().err


def test_unknown_precision_is_refused_not_guessed(tmp_path: Path) -> None:
    res = _single(tmp_path)
    data = json.loads(res.read_text())
    data["runs"][0]["key"] = "custom-sweep"
    data["config_path"] = str(tmp_path / "gone.json")
    res.write_text(json.dumps(data))
    with pytest.raises(UserError, match="precision unknown"):
        build_card([load_card_source(res)])


def test_precision_follows_the_effective_dtype_not_the_sweep_key() -> None:
    from cvs_tui.core.card.facts import effective_precision

    assert effective_precision({"dtype": "float32", "quantization": ""}) == "fp32"
    assert effective_precision({}) == "bf16"  # MaxText's default dtype is bfloat16
    assert effective_precision({"dtype": "bfloat16"}) == "bf16"
    assert effective_precision({"dtype": "float32", "quantization": "fp8"}) == "fp8"
    assert effective_precision({"quantization": "int8"}) is None  # no card word for it: refused, not guessed


def test_card_has_no_logger_location_as_fingerprint(tmp_path: Path) -> None:
    card = build_card([load_card_source(_single(tmp_path))])
    assert card.verification_environment.maxtext_source_fingerprint is None
    assert "metric_logger.py" not in card_to_yaml(card)


def test_card_validate_suggests_the_key_meant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "card.yaml"
    assert main(["card", str(_single(tmp_path)), "--out", str(out)]) == 0
    out.write_text(out.read_text().replace("title:", "titel:", 1))
    capsys.readouterr()
    assert main(["card", "validate", str(out)]) != 0
    text = capsys.readouterr()
    assert "titel: key not allowed in a card; did you mean 'title'?" in text.out + text.err


def test_card_validate_rederives_every_number_from_its_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A number changed by hand is a problem once the results are named; without them validate says the
    numbers were not re-derived instead of implying they were checked."""
    res = _single(tmp_path)
    out = tmp_path / "card.yaml"
    assert main(["card", str(res), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["card", "validate", str(out), "--results", str(res)]) == 0
    said = capsys.readouterr().out
    assert "number(s) re-derived from 1 result(s)" in said and " 0 number(s)" not in said
    assert main(["card", "validate", str(out)]) == 0
    assert "numbers not re-derived" in capsys.readouterr().out
    text = out.read_text()
    key = "tokens_per_sec_per_gpu: "
    i = text.index(key) + len(key)
    j = text.index("\n", i)
    edited = tmp_path / "edited.yaml"
    edited.write_text(text[:i] + str(float(text[i:j]) + 10000) + text[j:])
    assert main(["card", "validate", str(edited), "--results", str(res)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any("tokens_per_sec_per_gpu" in line and "re-derived from the results" in line for line in lines)
