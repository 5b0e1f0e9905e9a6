"""Upstream CVS inputs run unchanged: a corpus of upstream-shaped configs and cluster files (our own,
written in the shapes of ROCm/cvs's jaxmaxtext configs and cluster-file templates, `<changeme>` filled in
as a user would) plans with exit 0; the old layout is named with its fix and converts with `migrate`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cvs_tui.cli.main import main
from cvs_tui.core.cluster import load_cluster
from cvs_tui.core.config.host_config import (
    effective_host_config,
    gpu_device_problem,
    parse_runtime_args,
    vendor_from_gpu_name,
)
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import build_plan
from cvs_tui.core.runner.nodes.prep import auth_from_docker_config, parse_device_probe, qualified
from cvs_tui.core.runner.nodes.script import LaunchSpec, build_launcher
from cvs_tui.core.transport import expanding_quote

CORPUS = Path(__file__).parents[1] / "fixtures" / "upstream"
SINGLE = sorted(p for p in CORPUS.glob("mi*_single.json") if "old_layout" not in p.name)
DISTRIBUTED = sorted(CORPUS.glob("mi*_distributed.json"))
MULTI_CLUSTERS = ["cluster.json", "cluster_container.json", "cluster_rack.json", "cluster_password.json"]
PAIRS = [(c, "cluster_single.json") for c in SINGLE] + [(c, k) for c in DISTRIBUTED for k in MULTI_CLUSTERS]


@pytest.mark.parametrize(("config", "cluster"), PAIRS, ids=lambda v: getattr(v, "stem", v))
def test_every_upstream_shaped_pair_plans_with_exit_0(config: Path, cluster: str, capsys) -> None:
    assert main(["plan", str(config), "--cluster", str(CORPUS / cluster), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["host_config"]["NetworkMode"] == "host"
    assert "hunter2" not in json.dumps(plan) and "hf_notreal" not in json.dumps(plan)


def test_corpus_covers_single_and_distributed() -> None:
    assert len(SINGLE) >= 2 and len(DISTRIBUTED) >= 2


def test_node_rank_in_container_env_is_a_warning_and_never_reaches_the_run_env() -> None:
    loaded = load_config(CORPUS / "mi3xx_jaxmaxtext_llama-3.3-70b_single.json", user="u")
    assert any(w.startswith("container.env.NODE_RANK: ignored, cvs-tui sets") for w in loaded.warnings)
    plan = build_plan(loaded, load_cluster(CORPUS / "cluster_single.json"), out_dir=Path("r"), run_id="x")
    assert all("NODE_RANK" not in r.env and r.node_env[0]["NODE_RANK"] == "0" for r in plan.runs)


def test_old_layout_is_one_line_naming_migrate(tmp_path: Path) -> None:
    with pytest.raises(UserError) as ei:
        load_config(CORPUS / "mi300x_old_layout_single.json")
    (line,) = ei.value.problems
    assert "pre-2026 CVS layout" in line and "cvs-tui config migrate" in line


# upstream CVS's training/jax suite (config + model_params), as in its mi300x_jax_llama3_1_70b_single.json
_TRAINING_JAX = {
    "config": {
        "container_image": "rocm/jax-training:maxtext-v26.3",
        "nnodes": "1",
        "env_vars": {"NNODES": "1"},
    },
    "model_params": {"single_node": {"llama3.1-70b": {"mi300x": {"per_device_batch_size": "2"}}}},
}


def test_another_upstream_suites_layout_is_one_line_for_plan_and_migrate(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "mi300x_jax_llama3_1_70b_single.json"
    cfg.write_text(json.dumps(_TRAINING_JAX))
    with pytest.raises(UserError) as ei:
        load_config(cfg)
    (line,) = ei.value.problems
    assert "training/jax layout (config + model_params), not a jaxmaxtext config" in line
    assert main(["config", "migrate", str(cfg), str(tmp_path / "new.json")]) == 2
    (err,) = capsys.readouterr().err.splitlines()
    assert "training/jax layout" in err and "pre-2026 jaxmaxtext layout only" in err
    assert "already in the current layout" not in err
    assert not (tmp_path / "new.json").exists()


def test_migrate_writes_a_config_that_validates(tmp_path: Path, capsys) -> None:
    dest = tmp_path / "new.json"
    assert main(["config", "migrate", str(CORPUS / "mi300x_old_layout_single.json"), str(dest)]) == 0
    loaded = load_config(dest, user="u")
    assert [r.key for r in loaded.runs] == ["NNODES_1_STEPS_30_PRECISION_BF16_BATCH_5_GBS_40_SEQLEN_8192"]
    assert loaded.runs[0].maxtext_config["per_device_batch_size"] == 5
    assert loaded.config.train_params.hf_model_id == "NousResearch/Meta-Llama-3-70B"
    assert (
        loaded.config.container.env["NCCL_IB_DISABLE"] == "1"
        and "NODE_RANK" not in loaded.config.container.env
    )
    assert loaded.mode == "single"
    assert main(["config", "migrate", str(CORPUS / "mi300x_old_layout_single.json"), str(dest)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err


def test_cluster_keys_as_upstream() -> None:
    c = load_cluster(CORPUS / "cluster.json")
    assert c.env_vars == {"PATH": "/shared/apps/rocm-7.1/bin:$PATH", "UCX_TLS": "rc,sm"}
    rack = load_cluster(CORPUS / "cluster_rack.json")
    assert any("racks: ignored" in w for w in rack.warnings)
    assert "swpass" not in " ".join(rack.warnings)
    pw = load_cluster(CORPUS / "cluster_password.json")
    assert pw.password == "hunter2-not-real" and "hunter2" not in repr(pw)
    assert any("keys are preferred" in w for w in pw.warnings)
    cont = load_cluster(CORPUS / "cluster_container.json")
    assert {w.split(": ")[1] for w in cont.warnings} == {"orchestrator", "container"}


def test_unknown_cluster_key_is_still_an_error(tmp_path: Path) -> None:
    doc = json.loads((CORPUS / "cluster.json").read_text())
    doc["env_var"] = {}
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_ed25519").write_text("x")
    (tmp_path / "c.json").write_text(json.dumps(doc))
    with pytest.raises(UserError) as ei:
        load_cluster(tmp_path / "c.json")
    assert "did you mean 'env_vars'" in ei.value.problems[0]


def test_runtime_args_are_checked_at_load(tmp_path: Path) -> None:
    doc = json.loads((CORPUS / "mi3xx_jaxmaxtext_llama-3.3-70b_single.json").read_text())
    doc["container"]["runtime"]["args"].update({"gpus": "all", "privileged": "yes"})
    (tmp_path / "c.json").write_text(json.dumps(doc))
    (tmp_path / doc["threshold_json"]).write_text((CORPUS / doc["threshold_json"]).read_text())
    with pytest.raises(UserError) as ei:
        load_config(tmp_path / "c.json")
    assert sorted(p.split(":")[0] for p in ei.value.problems) == [
        "container.runtime.args.gpus",
        "container.runtime.args.privileged",
    ]


def test_amd_defaults_lists_add_scalars_override_and_defaults_false() -> None:
    args = parse_runtime_args({"network": "none", "cap_add": ["NET_ADMIN"], "devices": ["/dev/null:/dev/x"]})
    hc = effective_host_config(args, "amd", infiniband=("/dev/infiniband/uverbs0",))
    assert [d["PathInContainer"] for d in hc["Devices"]] == [
        "/dev/kfd",
        "/dev/dri",
        "/dev/infiniband",
        "/dev/infiniband/uverbs0",
        "/dev/x",
    ]
    assert hc["NetworkMode"] == "none" and hc["IpcMode"] == "host"
    assert hc["CapAdd"] == ["SYS_PTRACE", "IPC_LOCK", "SYS_ADMIN", "NET_ADMIN"]
    assert hc["Ulimits"][0] == {"Name": "memlock", "Soft": -1, "Hard": -1}
    assert gpu_device_problem(hc, "amd") is None
    off = effective_host_config(parse_runtime_args({"defaults": False}), "amd")
    assert off == {} and gpu_device_problem(off, "amd") is not None
    nv = effective_host_config(parse_runtime_args({}), "nvidia", infiniband=None)
    assert nv["DeviceRequests"][0]["Count"] == -1 and "GroupAdd" not in nv and nv["Devices"] == []
    assert gpu_device_problem(nv, "nvidia") is None


@pytest.mark.parametrize(
    ("name", "vendor"),
    [
        ("mi300x", "amd"),
        ("mi3xx", "amd"),
        ("MI355X", "amd"),
        ("h100", "nvidia"),
        ("GB200", "nvidia"),
        ("x", None),
    ],
)
def test_vendor_from_gpu_name(name: str, vendor: str | None) -> None:
    assert vendor_from_gpu_name(name) == vendor


def test_expanding_quote_expands_only_variable_references() -> None:
    value = "/opt/rocm/bin:$PATH:${HOME}/x $(id) `id`; 'q' \n\"x\""
    q = expanding_quote(value)
    out = subprocess.run(
        ["sh", "-c", f"printf %s {q}"],
        env={"PATH": "/bin:/usr/bin", "HOME": "/h"},
        capture_output=True,
        text=True,
    ).stdout
    assert out == "/opt/rocm/bin:/bin:/usr/bin:/h/x $(id) `id`; 'q' \n\"x\""
    spec = LaunchSpec(
        log_path="/l", config_path="/c", train_script_paths=["/t.py"], pre_env={"PATH": "/x:$PATH"}
    )
    assert 'export PATH=/x:"${PATH}"' in build_launcher(spec)


def test_node_docker_config_credentials_and_device_probe() -> None:
    import base64

    raw = base64.b64encode(b"alice:s3cret").decode()
    text = json.dumps(
        {"auths": {"https://index.docker.io/v1/": {"auth": raw}, "reg.example:5000": {"auth": raw}}}
    )
    assert auth_from_docker_config(text, "docker.io") == {
        "username": "alice",
        "password": "s3cret",
        "serveraddress": "https://index.docker.io/v1/",
    }
    assert (auth_from_docker_config(text, "reg.example:5000") or {}).get("username") == "alice"
    assert auth_from_docker_config(text, "other.example") is None
    assert (
        qualified("rocm/jax:1") == "docker.io/rocm/jax:1"
        and qualified("127.0.0.9:5000/a:1") == "127.0.0.9:5000/a:1"
    )
    d = parse_device_probe("dev:/dev/kfd\ndev:/dev/dri\nib:\nib:/dev/infiniband/uverbs0\n")
    assert d.vendor == "amd" and d.infiniband == ("/dev/infiniband/uverbs0",)
    assert parse_device_probe("").infiniband is None and parse_device_probe("").vendor is None
