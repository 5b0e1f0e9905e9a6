"""The resolved plan: stages and why, per-run YAML/env/XLA_FLAGS/node env, checkpoint phases, masking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from _config_samples import BF16, FP8, make_single, write_config

from cvs_tui.core.cluster import cluster_from_nodes_arg, local_cluster
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, build_plan, format_plan, xla_flags_value

STAGE_ORDER_HEAD = [
    "preflight",
    "node_health",
    "launch_container",
    "rdma",
    "tokenizer",
    "maxtext_setup",
    "smoke",
]


def plan_for(tmp_path: Path, mutate: Any = None, nodes: str = "h1,h2", **kw: Any) -> Plan:
    loaded = load_config(write_config(tmp_path, mutate, **kw), user="alice")
    cluster = cluster_from_nodes_arg(nodes, user="alice")
    return build_plan(loaded, cluster, out_dir=tmp_path / "run", run_id="RID")


def test_stage_order_and_reasons(tmp_path: Path) -> None:
    plan = plan_for(tmp_path)
    names = [s.name for s in plan.stages]
    assert names == [
        *STAGE_ORDER_HEAD,
        f"run:{BF16}",
        f"run:{FP8}",
        "checkpoint_resume",
        "report",
        "teardown",
    ]
    enabled = {s.name: s.enabled for s in plan.stages}
    assert enabled == {
        "preflight": True,
        "node_health": True,
        "launch_container": True,
        "rdma": True,
        "tokenizer": False,
        "maxtext_setup": False,
        "smoke": True,
        f"run:{BF16}": True,
        f"run:{FP8}": True,
        "checkpoint_resume": False,
        "report": True,
        "teardown": True,
    }
    assert "synthetic" in plan.stage("tokenizer").reason
    assert "opt-in" in plan.stage("checkpoint_resume").reason
    assert all(s.reason for s in plan.stages)


def test_single_node_skips_rdma_and_smoke_can_be_disabled(tmp_path: Path) -> None:
    def single_nosmoke(cfg: dict[str, Any]) -> None:
        make_single(cfg)
        cfg["smoke"] = {"enabled": False}

    plan = plan_for(tmp_path, single_nosmoke, nodes="h1")
    assert plan.mode == "single"
    assert not plan.stage("rdma").enabled and "single-node" in plan.stage("rdma").reason
    assert not plan.stage("smoke").enabled and "smoke.enabled is false" in plan.stage("smoke").reason
    assert [r.kind for r in plan.runs] == ["sweep", "sweep"]


def test_single_node_config_with_two_nodes_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(UserError) as exc:
        plan_for(tmp_path, make_single, nodes="h1,h2")
    (line,) = exc.value.problems
    assert line.startswith("--nodes: 2 nodes given to a single-node config")


def test_tokenizer_runs_when_any_run_uses_real_data(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, lambda c: c["sweeps"][FP8].update(dataset_type="hf"))
    st = plan.stage("tokenizer")
    assert st.enabled and FP8 in st.reason and "NousResearch/Meta-Llama-3.1-8B" in st.reason
    assert "/home/alice/cache/maxtext/llama" in st.reason


def test_maxtext_setup_when_branch_or_install_set(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, lambda c: c["train_params"].update(maxtext_branch="release/v26.7"))
    assert plan.stage("maxtext_setup").enabled and "release/v26.7" in plan.stage("maxtext_setup").reason
    plan = plan_for(tmp_path, lambda c: c["train_params"].update(maxtext_install_cmd="pip install -e ."))
    assert plan.stage("maxtext_setup").enabled and "pip install -e ." in plan.stage("maxtext_setup").reason


def test_sweep_runs_have_injected_names_yaml_env_and_cells(tmp_path: Path) -> None:
    plan = plan_for(tmp_path)
    smoke, bf16, fp8 = plan.runs
    assert bf16.key == BF16 and bf16.kind == "sweep" and bf16.slug == "BS_3_PRECISION_BF16_SL_8192"
    assert bf16.run_name == "cvs_llama3.1-8b_BS_3_PRECISION_BF16_SL_8192"
    assert bf16.base_output_directory == "/home/alice/LOGS/jaxmaxtext/RID/BS_3_PRECISION_BF16_SL_8192"
    assert bf16.maxtext_config["run_name"] == bf16.run_name
    assert bf16.maxtext_config["base_output_directory"] == bf16.base_output_directory
    assert yaml.safe_load(bf16.yaml_text) == bf16.maxtext_config
    assert list(yaml.safe_load(bf16.yaml_text))[:2] == ["base_config", "model_name"]  # file order kept
    assert fp8.steps == 10 and fp8.maxtext_config["quantization"] == "nanoo_fp8"
    assert (
        bf16.env["XLA_FLAGS"] == "--xla_gpu_autotune_level=0 --xla_gpu_enable_latency_hiding_scheduler=true"
    )
    assert bf16.env["NCCL_IB_HCA"] == "rdma0,rdma1"
    assert bf16.threshold_cell is not None and bf16.threshold_cell["training.final_loss"].value == 15.0
    assert smoke.threshold_cell is None


def test_empty_xla_flags_sets_no_xla_flags(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, lambda c: c["train_params"].update(xla_flags={}))
    assert all("XLA_FLAGS" not in r.env and r.xla_flags is None for r in plan.runs)
    assert xla_flags_value({}) is None
    assert xla_flags_value({"a": 1, "b": False, "c": ""}) == "--a=1 --b=false --c="


def test_smoke_run(tmp_path: Path) -> None:
    plan = plan_for(
        tmp_path, lambda c: c.update(smoke={"steps": 3, "per_device_batch_size": 2, "max_target_length": 512})
    )
    smoke = plan.runs[0]
    assert (smoke.key, smoke.slug, smoke.kind) == ("SMOKE", "SMOKE", "smoke")
    mc = smoke.maxtext_config
    assert (mc["steps"], mc["per_device_batch_size"], mc["max_target_length"], mc["quantization"]) == (
        3,
        2,
        512,
        "",
    )
    assert smoke.steps == 3 and smoke.run_name == "cvs_llama3.1-8b_SMOKE"


def test_node_env_per_rank(tmp_path: Path) -> None:
    plan = plan_for(
        tmp_path, lambda c: c["container"]["env"].update(JAX_COORDINATOR_PORT="23456"), nodes="h1,h2,h3"
    )
    env = plan.runs[1].node_env
    assert env[2] == {
        "JAX_COORDINATOR_IP": "h1",
        "JAX_COORDINATOR_PORT": "23456",
        "NNODES": "3",
        "NODE_RANK": "2",
        "JAX_PROCESS_INDEX": "2",
    }
    assert [e["NODE_RANK"] for e in env] == ["0", "1", "2"]
    assert plan.coordinator == "h1" and plan.coordinator_port == "23456"


def test_default_coordinator_port_and_local_coordinator(tmp_path: Path) -> None:
    def cpu(cfg: dict[str, Any]) -> None:
        make_single(cfg)
        cfg["container"]["env"].pop("JAX_COORDINATOR_PORT")
        cfg["train_params"]["maxtext_config"]["hardware"] = "cpu"

    loaded = load_config(write_config(tmp_path, cpu))
    plan = build_plan(loaded, local_cluster(), out_dir=tmp_path, run_id="R")
    (env,) = plan.runs[1].node_env
    assert env["JAX_COORDINATOR_IP"] == "127.0.0.1" and env["JAX_COORDINATOR_PORT"] == "12346"
    assert env["JAX_COORDINATOR_ADDRESS"] == "127.0.0.1" and env["JOB_INDEX"] == "0"
    assert (
        env["JOB_COMPLETION_INDEX"] == "0"
        and env["PROCESSES_IN_JOB"] == "1"
        and env["JAX_PROCESS_COUNT"] == "1"
    )
    assert plan.runs[1].maxtext_config["skip_jax_distributed_system"] is True


def test_cpu_two_local_ranks(tmp_path: Path) -> None:
    def cpu(cfg: dict[str, Any]) -> None:
        cfg["train_params"]["maxtext_config"]["hardware"] = "cpu"

    plan = plan_for(tmp_path, cpu, nodes="localhost,localhost")
    r = plan.runs[1]
    assert "skip_jax_distributed_system" not in r.maxtext_config
    assert [e["JOB_COMPLETION_INDEX"] for e in r.node_env] == ["0", "1"]
    assert all(
        e["PROCESSES_IN_JOB"] == "2" and e["JAX_COORDINATOR_ADDRESS"] == "127.0.0.1" for e in r.node_env
    )
    explicit = plan_for(
        tmp_path,
        lambda c: (cpu(c), c["train_params"]["maxtext_config"].update(skip_jax_distributed_system=False)),
        nodes="localhost",
    )
    assert explicit.runs[1].maxtext_config["skip_jax_distributed_system"] is False


def test_gpu_runs_have_no_cpu_vars(tmp_path: Path) -> None:
    assert "JOB_INDEX" not in plan_for(tmp_path).runs[1].node_env[0]


def test_checkpoint_resume_phases(tmp_path: Path) -> None:
    def ckpt(cfg: dict[str, Any]) -> None:
        cfg["checkpoint_resume"] = {
            "enabled": True,
            "sweep": FP8,
            "steps_before_ckpt": 6,
            "steps_after_resume": 4,
            "checkpoint_period": 3,
            "smoke_model_overrides": {"base_num_decoder_layers": 2},
        }

    plan = plan_for(tmp_path, ckpt)
    assert plan.stage("checkpoint_resume").enabled and FP8 in plan.stage("checkpoint_resume").reason
    p1, p2, ref = plan.runs[-3:]
    assert [(r.key, r.slug, r.kind) for r in (p1, p2, ref)] == [
        ("CKPT-1", "CKPT_1", "ckpt_phase1"),
        ("CKPT-2", "CKPT_2", "ckpt_phase2"),
        ("CKPT-REF", "CKPT_REF", "ckpt_reference"),
    ]
    assert all(r.source_sweep == FP8 for r in (p1, p2, ref))
    assert (p1.steps, p2.steps, ref.steps) == (6, 10, 10)
    assert p1.maxtext_config["enable_checkpointing"] is True and p1.maxtext_config["checkpoint_period"] == 3
    assert p2.maxtext_config["enable_checkpointing"] is True
    # phase 2 restores phase 1's checkpoint and writes none of its own: its period is past its last step
    assert p2.maxtext_config["checkpoint_period"] > p2.steps
    assert ref.maxtext_config["enable_checkpointing"] is False
    # phase 2 resumes: same run_name and output dir as phase 1; the reference is separate
    assert (p2.run_name, p2.base_output_directory) == (p1.run_name, p1.base_output_directory)
    assert ref.run_name != p1.run_name and ref.base_output_directory != p1.base_output_directory
    for r in (p1, p2, ref):
        assert r.maxtext_config["learning_rate_schedule_steps"] == 10
        assert r.maxtext_config["base_num_decoder_layers"] == 2
        assert r.maxtext_config["quantization"] == "nanoo_fp8"
        assert r.threshold_cell is None
    assert plan.stages[-3].name == "checkpoint_resume"


def test_checkpoint_resume_without_the_reference_run(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, lambda c: c.update(checkpoint_resume={"enabled": True, "reference_run": False}))
    kinds = [r.kind for r in plan.runs]
    assert "ckpt_reference" not in kinds and kinds[-2:] == ["ckpt_phase1", "ckpt_phase2"]
    assert plan.checkpoint_resume["reference_run"] is False
    assert "compare with phase 1 (reference_run is false)" in plan.stage("checkpoint_resume").reason
    # the stage's sub-stages follow the plan: no CKPT-REF row waits for a run that never comes
    from cvs_tui.core.runner.stages.checkpoint_resume import CheckpointResume

    assert CheckpointResume().sub_stages(plan) == ["run:CKPT-1", "run:CKPT-2"]


def test_checkpoint_resume_reference_run_must_be_a_bool(tmp_path: Path) -> None:
    with pytest.raises(UserError) as exc:
        plan_for(
            tmp_path, lambda c: c.update(checkpoint_resume={"enabled": True, "reference_run": "sometimes"})
        )
    assert "reference_run" in str(exc.value)


def test_checkpoint_sweep_defaults_to_first_selected_run(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, lambda c: c.update(checkpoint_resume={"enabled": True}, runs=[FP8, BF16]))
    assert plan.runs[-1].source_sweep == FP8


def test_checkpoint_sweep_must_be_selected(tmp_path: Path) -> None:
    with pytest.raises(UserError) as exc:
        plan_for(tmp_path, lambda c: c.update(checkpoint_resume={"enabled": True, "sweep": FP8}, runs=[BF16]))
    (line,) = exc.value.problems
    assert line.startswith("checkpoint_resume.sweep: ")


def test_container_name_and_lifetimes(tmp_path: Path) -> None:
    plan = plan_for(tmp_path)
    assert plan.container_name == "rocm-jaxmaxtext-test-alice-RID"
    persistent = plan_for(tmp_path, lambda c: c["container"].update(lifetime="persistent"))
    assert (
        persistent.container_name == "rocm-jaxmaxtext-test-alice" and not persistent.stage("teardown").enabled
    )
    nolaunch = plan_for(tmp_path, lambda c: c["container"].update(lifetime="no_launch"))
    assert nolaunch.container_name == "rocm-jaxmaxtext-test"
    assert not nolaunch.stage("launch_container").enabled and not nolaunch.stage("teardown").enabled
    host = plan_for(tmp_path, lambda c: c["container"].update(runtime={"name": "host"}))
    assert not host.stage("launch_container").enabled and "host" in host.stage("launch_container").reason


def test_secrets_masked_in_display(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVS_TEST_SECRET", "s3cr3t-value")
    monkeypatch.setenv(
        "CVS_TEST_PASSWORD", "pw-value-1"
    )  # a literal secret in the file is refused (audit 2 #11)

    def secret(cfg: dict[str, Any]) -> None:
        cfg["container"]["env"]["WANDB_API_KEY"] = "{env.CVS_TEST_SECRET}"
        cfg["container"]["env"]["MY_PASSWORD"] = "{env.CVS_TEST_PASSWORD}"
        cfg["train_params"]["maxtext_config"]["hf_access_token"] = "hf_tokenvalue"

    plan = plan_for(tmp_path, secret)
    assert plan.runs[1].env["WANDB_API_KEY"] == "s3cr3t-value"  # the runner gets the real value
    shown = json.dumps(plan.display_dict()) + format_plan(plan)
    for value in ("s3cr3t-value", "pw-value-1", "hf_tokenvalue"):
        assert value not in shown
    d = plan.display_dict()
    assert d["runs"][1]["env"]["WANDB_API_KEY"] == "***"
    assert "hf_access_token: '***'" in d["runs"][1]["yaml_text"]
    assert (
        d["runs"][1]["maxtext_config"]["tokenizer_path"] == "/home/alice/cache/maxtext/llama"
    )  # not a secret


def test_display_dict_is_stable_json(tmp_path: Path) -> None:
    d = plan_for(tmp_path).display_dict()
    assert d["schema_version"] == 1
    assert json.loads(json.dumps(d)) == d
    for key in (
        "run_id",
        "mode",
        "nodes",
        "stages",
        "runs",
        "container_name",
        "python",
        "train_script_paths",
        "paths",
        "preflight_errors",
        "warnings",
        "threshold_path",
        "out_dir",
    ):
        assert key in d
    run = d["runs"][1]
    for key in (
        "key",
        "slug",
        "kind",
        "steps",
        "run_name",
        "base_output_directory",
        "maxtext_config",
        "yaml_text",
        "env",
        "xla_flags",
        "node_env",
        "threshold_cell",
    ):
        assert key in run
    assert run["threshold_cell"]["training.final_loss"] == {
        "kind": "max",
        "value": 15.0,
        "tolerance_pct": None,
        "reference": None,
    }
    assert d["nodes"][1] == {
        "host": "h2",
        "rank": 1,
        "local": False,
        "user": "alice",
        "port": None,
        "key_file": None,
    }


def test_preflight_errors_carried_into_the_plan(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, lambda c: c["container"].update(image="img <changeme>"))
    assert len(plan.preflight_errors) == 1 and "nothing will be launched" in plan.stage("preflight").reason
    assert "PREFLIGHT ERROR: container.image" in format_plan(plan)


def test_format_plan_shows_everything(tmp_path: Path) -> None:
    text = format_plan(plan_for(tmp_path))
    for fragment in (
        "distributed",
        "rank 1  h2",
        "[skip] tokenizer",
        f"Run {BF16}",
        "run_name: cvs_llama3.1-8b_SMOKE",
        "XLA_FLAGS              --xla_gpu_autotune_level=0",
        "training.final_loss: max 15.0",
        "JAX_COORDINATOR_IP=h1",
    ):
        assert fragment in text, fragment


def test_cpu_distributed_skips_rdma(tmp_path: Path) -> None:
    plan = plan_for(
        tmp_path,
        lambda c: c["train_params"]["maxtext_config"].update(hardware="cpu"),
        nodes="localhost,localhost",
    )
    assert (
        plan.mode == "distributed" and not plan.stage("rdma").enabled and "cpu" in plan.stage("rdma").reason
    )
