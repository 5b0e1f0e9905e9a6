"""The config loader: comments, <changeme>, threshold_json, mode, defaults, strict schema, round-trip."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _config_samples import BF16, FP8, make_single, write_config

from cvs_tui.core.config.blocks import ThresholdKind
from cvs_tui.core.config.loader import PER_NODE_ENV_VARS, load_config
from cvs_tui.core.config.model import CvsConfig, dump_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.parse import DEFAULT_ERROR_PATTERNS

LINE = re.compile(r"^\S.*: .+; .+$")  # `<json.path>: <problem>; <fix>`


def problems_of(path: Path, **kw: Any) -> list[str]:
    with pytest.raises(UserError) as exc:
        load_config(path, **kw)
    for line in exc.value.problems:
        assert LINE.match(line), line
        assert "\n" not in line
    return exc.value.problems


def test_valid_config_loads_with_documented_defaults(tmp_path: Path) -> None:
    loaded = load_config(write_config(tmp_path), user="alice")
    cfg = loaded.config
    assert loaded.mode == "distributed"
    assert loaded.model_label == "llama3.1-8b"
    assert loaded.warnings == [] and loaded.preflight_errors == []
    assert cfg.smoke.enabled is True and cfg.smoke.steps == 5
    assert (cfg.smoke.per_device_batch_size, cfg.smoke.max_target_length) == (1, 2048)
    assert cfg.checkpoint_resume.enabled is False
    assert (cfg.checkpoint_resume.steps_before_ckpt, cfg.checkpoint_resume.steps_after_resume) == (6, 6)
    assert cfg.checkpoint_resume.checkpoint_period == 5 and cfg.checkpoint_resume.loss_tolerance == 0.1
    assert cfg.loss_curve.sample_every == 10 and cfg.loss_curve.milestone_steps == [100, 500, 1000, 5000]
    assert cfg.loss_curve.max_slope == 0.0 and cfg.loss_curve.enforce is True
    assert cfg.scaling_baseline.tokens_per_sec_total == 0.0 and cfg.scaling_baseline.num_nodes == 1
    assert cfg.convergence.target_metric == "auto" and cfg.convergence.target_value == 0.0
    assert cfg.error_patterns is None and loaded.error_patterns is None
    assert cfg.train_params.python == "python3" and cfg.train_params.maxtext_root == "/workspace/maxtext"
    assert loaded.threshold_path == tmp_path / "sample_threshold.json"
    assert loaded.thresholds[BF16]["training.final_loss"].kind is ThresholdKind.MAX


def test_minimal_config_gets_root_defaults(tmp_path: Path) -> None:
    def strip(cfg: dict[str, Any]) -> None:
        for k in ("enforce_thresholds", "gpus_per_node", "smoke"):
            cfg.pop(k)
        for k in ("models_dir", "hf_token_file", "temp_dir"):
            cfg["paths"].pop(k)
        cfg["train_params"].pop("train_script_paths")

    cfg = load_config(write_config(tmp_path, strip), user="bob").config
    assert cfg.enforce_thresholds is True and cfg.gpus_per_node == 8 and cfg.smoke.enabled is True
    assert cfg.paths.models_dir == "/home/bob/cache/maxtext"
    assert cfg.paths.hf_token_file == "/home/bob/.hf_token"
    assert cfg.paths.temp_dir == "/tmp/bob/jaxmaxtext"
    assert cfg.train_params.train_script_paths[0].endswith("pre_train/train.py")


def test_comment_keys_dropped_everywhere_but_kept_in_raw(tmp_path: Path) -> None:
    loaded = load_config(write_config(tmp_path), user="u")
    dumped = json.dumps(dump_config(loaded.config))
    assert '"_' not in dumped
    assert "_env_comment" not in loaded.config.container.env
    assert loaded.config.sweeps[BF16] == {}
    assert loaded.raw["_comment"] == "a root comment"
    assert "_comment" in loaded.raw["sweeps"][BF16]


def test_comment_key_inside_maxtext_config_is_an_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda c: c["train_params"]["maxtext_config"].update({"_why": "x"}))
    (line,) = problems_of(path)
    assert line.startswith("train_params.maxtext_config._why: ")
    assert "MaxText" in line


def test_changeme_env_threshold_and_other_values_all_listed(tmp_path: Path) -> None:
    def tag(cfg: dict[str, Any]) -> None:
        cfg["container"]["env"]["NCCL_IB_HCA"] = "rdma0,rdma1 <changeme>"
        cfg["container"]["env"]["NCCL_SOCKET_IFNAME"] = "eno0 <CHANGEME>"
        cfg["threshold_json"] = "mi325x_threshold.json <changeme>"
        cfg["train_params"]["hf_model_id"] = "org/model <changeme>"

    lines = problems_of(write_config(tmp_path, tag))
    paths = sorted(line.split(": ")[0] for line in lines)
    assert paths == [
        "container.env.NCCL_IB_HCA",
        "container.env.NCCL_SOCKET_IFNAME",
        "threshold_json",
        "train_params.hf_model_id",
    ]
    assert all("<changeme>" in line for line in lines)


def test_changeme_image_is_a_preflight_error_not_a_load_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda c: c["container"].update(image="rocm/jax:tag <changeme>"))
    loaded = load_config(path)
    (line,) = loaded.preflight_errors
    assert line.startswith("container.image: ") and "image tag" in line


def test_changeme_image_is_listed_with_the_other_tags_in_one_pass(tmp_path: Path) -> None:
    """A config with load errors still names the tagged image, so the user fixes all in one go (F21)."""

    def tag(cfg: dict[str, Any]) -> None:
        cfg["container"]["image"] = "rocm/jax:tag <changeme>"
        cfg["container"]["env"]["NCCL_IB_HCA"] = "rdma0 <changeme>"

    paths = sorted(line.split(": ")[0] for line in problems_of(write_config(tmp_path, tag)))
    assert paths == ["container.env.NCCL_IB_HCA", "container.image"]


def test_threshold_json_resolves_next_to_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path / "cfgs")
    monkeypatch.chdir(tmp_path)
    assert load_config(path).threshold_path == tmp_path / "cfgs" / "sample_threshold.json"
    abs_path = write_config(
        tmp_path / "b", lambda c: c.update(threshold_json=str(tmp_path / "cfgs" / "sample_threshold.json"))
    )
    assert load_config(abs_path).threshold_path == tmp_path / "cfgs" / "sample_threshold.json"


def test_empty_threshold_json_means_stem_threshold(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda c: c.update(threshold_json=""), name="sample.json")
    assert load_config(path).threshold_path == tmp_path / "sample_threshold.json"


def test_missing_threshold_file_names_both_paths(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda c: c.update(threshold_json="nope_threshold.json"))
    (line,) = problems_of(path)
    assert line.startswith("threshold_json: ")
    assert str(tmp_path / "nope_threshold.json") in line and str(path) in line


@pytest.mark.parametrize(
    "var", ["NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_GID_INDEX"]
)
def test_mode_is_distributed_when_any_rdma_var_is_set(tmp_path: Path, var: str) -> None:
    def only(cfg: dict[str, Any]) -> None:
        make_single(cfg)
        cfg["container"]["env"][var] = "x"

    assert load_config(write_config(tmp_path, only)).mode == "distributed"


def test_mode_is_single_without_rdma_vars(tmp_path: Path) -> None:
    assert load_config(write_config(tmp_path, make_single)).mode == "single"


@pytest.mark.parametrize(
    ("mutate", "path", "hint"),
    [
        (lambda c: c.update(stpes=5), "stpes", None),
        (lambda c: c.update(gpus_per_nod=8), "gpus_per_nod", "gpus_per_node"),
        (lambda c: c["container"].update(imag="x"), "container.imag", "image"),
        (lambda c: c["container"]["runtime"].update(nmae="docker"), "container.runtime.nmae", "name"),
        (lambda c: c["train_params"].update(xla_flag={}), "train_params.xla_flag", "xla_flags"),
        (lambda c: c["smoke"].update(stpes=5), "smoke.stpes", "steps"),
        (
            lambda c: c.update(checkpoint_resume={"steps_befor_ckpt": 4}),
            "checkpoint_resume.steps_befor_ckpt",
            "steps_before_ckpt",
        ),
        (lambda c: c.update(loss_curve={"sample_evry": 4}), "loss_curve.sample_evry", "sample_every"),
        (lambda c: c["paths"].update(log_dri="/x"), "paths.log_dri", "log_dir"),
        (lambda c: c.update(convergence={"target_valu": 1.0}), "convergence.target_valu", "target_value"),
        (lambda c: c.update(scaling_baseline={"num_node": 2}), "scaling_baseline.num_node", "num_nodes"),
    ],
)
def test_unknown_keys_are_errors_with_path_and_hint(
    tmp_path: Path, mutate: Any, path: str, hint: str
) -> None:
    (line,) = problems_of(write_config(tmp_path, mutate))
    assert line.startswith(f"{path}: unknown key")
    if hint:
        assert f"did you mean '{hint}'" in line


def test_typo_inside_maxtext_config_is_passed_through(tmp_path: Path) -> None:
    loaded = load_config(
        write_config(tmp_path, lambda c: c["train_params"]["maxtext_config"].update(stpes=3))
    )
    assert loaded.runs[0].maxtext_config["stpes"] == 3


def test_type_errors_name_the_field(tmp_path: Path) -> None:
    def bad(cfg: dict[str, Any]) -> None:
        cfg["gpus_per_node"] = "eight"
        cfg["container"]["lifetime"] = "forever"
        cfg["container"]["env"]["GPU_MAX_HW_QUEUES"] = 2
        cfg["smoke"]["steps"] = 0

    lines = problems_of(write_config(tmp_path, bad))
    starts = sorted(line.split(": ")[0] for line in lines)
    assert starts == ["container.env.GPU_MAX_HW_QUEUES", "container.lifetime", "gpus_per_node", "smoke.steps"]


def test_missing_required_blocks(tmp_path: Path) -> None:
    def strip(cfg: dict[str, Any]) -> None:
        del cfg["container"]["name"]
        del cfg["paths"]["log_dir"]
        del cfg["gpu_name"]

    lines = problems_of(write_config(tmp_path, strip))
    assert {line.split(": ")[0] for line in lines} == {"container.name", "paths.log_dir", "gpu_name"}
    assert all("required key is missing" in line for line in lines)


def test_launcher_owned_env_vars_are_rejected(tmp_path: Path) -> None:
    def bad(cfg: dict[str, Any]) -> None:
        cfg["container"]["env"].update(NODE_RANK="0", XLA_FLAGS="--x=1", HF_TOKEN="hf_abc")

    lines = problems_of(write_config(tmp_path, bad))
    assert sorted(line.split(": ")[0] for line in lines) == [
        "container.env.HF_TOKEN",
        "container.env.XLA_FLAGS",
    ]
    assert not any("hf_abc" in line for line in lines)


def test_per_node_env_vars_are_warnings_as_upstream_overrides_them(tmp_path: Path) -> None:
    def per_node(cfg: dict[str, Any]) -> None:
        cfg["container"]["env"].update(NODE_RANK="0", NNODES="auto", JAX_PROCESS_INDEX="0")
        cfg["container"]["env"]["JAX_COORDINATOR_IP"] = "10.0.0.1"

    loaded = load_config(write_config(tmp_path, per_node))
    flagged = sorted(w.split(":")[0] for w in loaded.warnings if "cvs-tui sets" in w)
    assert flagged == [f"container.env.{n}" for n in sorted(PER_NODE_ENV_VARS)]


def test_injected_keys_in_maxtext_config_are_errors(tmp_path: Path) -> None:
    def bad(cfg: dict[str, Any]) -> None:
        cfg["train_params"]["maxtext_config"]["run_name"] = "x"
        cfg["sweeps"][FP8]["base_output_directory"] = "/y"

    lines = problems_of(write_config(tmp_path, bad))
    assert sorted(line.split(": ")[0] for line in lines) == [
        f'sweeps["{FP8}"].base_output_directory',
        "train_params.maxtext_config.run_name",
    ]


def test_docker_runtime_needs_an_image_host_runtime_does_not(tmp_path: Path) -> None:
    (line,) = problems_of(write_config(tmp_path / "a", lambda c: c["container"].pop("image")))
    assert line.startswith("container.image: ")

    def host(cfg: dict[str, Any]) -> None:
        cfg["container"].pop("image")
        cfg["container"]["runtime"] = {"name": "host"}

    assert load_config(write_config(tmp_path / "b", host)).config.container.runtime.name == "host"


def test_bad_error_pattern_regex(tmp_path: Path) -> None:
    path = write_config(
        tmp_path, lambda c: c.update(error_patterns={"ok": r"NCCL \d{3}", "bad": "(unclosed"})
    )
    (line,) = problems_of(path)
    assert line.startswith("error_patterns.bad: invalid regex")


def test_error_patterns_kept_verbatim(tmp_path: Path) -> None:
    pats = {"NCCL ERROR": "NCCL ERROR|NCCL timeout", "x": r"code \d{3}"}
    loaded = load_config(write_config(tmp_path / "a", lambda c: c.update(error_patterns=pats)))
    assert loaded.config.error_patterns == pats
    # scanned beside the built-in set (a config pattern of a built-in name replaces it) ...
    assert loaded.error_patterns == {**DEFAULT_ERROR_PATTERNS, **pats}
    # ... or alone when the config opts out
    alone = load_config(
        write_config(tmp_path / "b", lambda c: c.update(error_patterns=pats, error_patterns_builtin=False))
    )
    assert alone.error_patterns == pats


def test_checkpoint_resume_checks(tmp_path: Path) -> None:
    def bad(cfg: dict[str, Any]) -> None:
        cfg["checkpoint_resume"] = {
            "enabled": True,
            "steps_before_ckpt": 4,
            "checkpoint_period": 5,
            "sweep": "BS=9",
        }

    lines = problems_of(write_config(tmp_path, bad))
    assert sorted(line.split(": ")[0] for line in lines) == [
        "checkpoint_resume.checkpoint_period",
        "checkpoint_resume.sweep",
    ]


def test_invalid_json_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu_name": "x",\n  oops}')
    (line,) = problems_of(bad)
    assert line.startswith(f"{bad}: invalid JSON at line 2")
    (line,) = problems_of(tmp_path / "absent.json")
    assert "not found" in line
    arr = tmp_path / "arr.json"
    arr.write_text("[1]")
    (line,) = problems_of(arr)
    assert "JSON object" in line


def test_every_problem_reported_at_once(tmp_path: Path) -> None:
    def many(cfg: dict[str, Any]) -> None:
        cfg["gpus_per_nod"] = 8  # 1 typo
        cfg["container"]["env"]["NCCL_IB_HCA"] = "x <changeme>"  # 2 tag
        cfg["paths"]["log_dir"] = "{paths.nope}/x"  # 3 unknown placeholder
        cfg["train_params"]["maxtext_config"]["_c"] = 1  # 4 comment in maxtext_config
        cfg["sweeps"]["BS=1,FOO=2"] = {}  # 5 bad sweep token
        cfg["runs"].append("BS=7")  # 6 unknown run
        cfg["smoke"]["stpes"] = 3  # 7 typo in block

    lines = problems_of(write_config(tmp_path, many))
    assert len(lines) == 7, lines


def test_round_trip_without_loss(tmp_path: Path) -> None:
    def extras(cfg: dict[str, Any]) -> None:
        cfg["checkpoint_resume"] = {"enabled": True, "smoke_model_overrides": {"base_num_decoder_layers": 2}}
        cfg["error_patterns"] = {"oom": "RESOURCE_EXHAUSTED"}
        cfg["train_params"]["model_id"] = "llama-8b"
        cfg["train_params"]["maxtext_config"]["nothing"] = None
        cfg["train_params"]["maxtext_config"]["nested"] = {"a": [1, 2.5, "x"]}

    first = load_config(write_config(tmp_path, extras), user="u")
    dumped = dump_config(first.config)
    again_path = tmp_path / "again.json"
    again_path.write_text(json.dumps(dumped))
    second = load_config(again_path, user="someone-else")
    assert second.config == first.config
    assert dump_config(second.config) == dumped
    assert second.runs == first.runs and second.thresholds == first.thresholds
    assert CvsConfig.model_validate(dumped) == first.config


def test_tagged_secret_value_is_not_echoed(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda c: c["container"]["env"].update(WANDB_API_KEY="abc123 <changeme>"))
    (line,) = problems_of(path)
    assert line.startswith("container.env.WANDB_API_KEY: ") and "abc123" not in line


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c.update(smoke=5), ["smoke: input should be an object"]),
        (lambda c: c.update(paths="x"), ["paths: input should be an object"]),
        (lambda c: c.update(sweeps=[]), ["sweeps: input should be an object"]),
        (lambda c: c.update(runs="x"), ["runs: input should be a valid list"]),
        (
            lambda c: c["train_params"].update(xla_flags={"a": {"b": 1}}),
            ["train_params.xla_flags.a: has the wrong type"],
        ),
        (lambda c: c["sweeps"].update({"BS=1": 3}), ['sweeps["BS=1"]: input should be an object']),
        (lambda c: c.update(train_params=None), ["train_params: input should be an object"]),
    ],
)
def test_wrong_shapes_give_one_line_each(tmp_path: Path, mutate: Any, expected: list[str]) -> None:
    lines = problems_of(write_config(tmp_path, mutate))
    assert len(lines) == len(expected), lines
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(start), line


def test_absent_threshold_json_means_stem_threshold(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda c: c.pop("threshold_json"), name="sample.json")
    assert load_config(path).threshold_path == tmp_path / "sample_threshold.json"
    (tmp_path / "sample_threshold.json").unlink()
    (line,) = problems_of(path)
    assert line.startswith("threshold_json: threshold file") and "(empty: the default)" in line
