"""The `plan`, `config list|copy|validate|schema` and (for now) `run` commands, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _config_samples import BF16, FP8, make_single, write_config

from cvs_tui.cli.main import main
from cvs_tui.core.config.shipped import list_shipped, sibling_thresholds

REPO = Path(__file__).resolve().parents[2]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_prints_a_readable_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_cli(capsys, "plan", str(write_config(tmp_path)), "--nodes", "h1,h2")
    assert rc == 0, err
    assert "distributed, 2 node(s)" in out and f"Run {BF16}" in out and "[skip] tokenizer" in out
    assert "base_output_directory: " in out


def test_plan_json_is_display_dict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "plan", str(write_config(tmp_path, make_single)), "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["schema_version"] == 1 and d["mode"] == "single"
    assert [r["key"] for r in d["runs"]] == ["SMOKE", BF16, FP8]
    assert d["nodes"] == [
        {"host": "localhost", "rank": 0, "local": True, "user": None, "port": None, "key_file": None}
    ]


def test_plan_out_writes_plan_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "runfolder"
    rc, out, _ = run_cli(capsys, "plan", str(write_config(tmp_path, make_single)), "--out", str(out_dir))
    assert rc == 0
    d = json.loads((out_dir / "plan.json").read_text())
    assert d["out_dir"] == str(out_dir) and "plan.json" in out


def test_plan_with_cluster_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"username": "ops", "node_dict": {"n1": {}, "n2": {}}}))
    rc, out, _ = run_cli(capsys, "plan", str(write_config(tmp_path)), "--cluster", str(cluster), "--json")
    assert rc == 0
    d = json.loads(out)
    assert [n["host"] for n in d["nodes"]] == ["n1", "n2"] and d["user"] == "ops"
    assert d["runs"][1]["base_output_directory"].startswith("/home/ops/LOGS/")  # {user-id} = the cluster user


def test_plan_refuses_tagged_image(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, lambda c: (make_single(c), c["container"].update(image="img <changeme>")))
    rc, out, err = run_cli(capsys, "plan", str(path))
    assert rc == 2
    assert "PREFLIGHT ERROR: container.image" in out
    assert "cvs-tui: error: container.image: still tagged <changeme>" in err


def test_validate_ok_and_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def unenforced(cfg: dict[str, Any]) -> None:
        make_single(cfg)
        cfg["enforce_thresholds"] = False

    path = write_config(tmp_path, unenforced, mutate_thresholds=lambda t: t.pop(FP8))
    rc, out, err = run_cli(capsys, "config", "validate", str(path))
    assert rc == 0
    assert out.startswith(f"OK {path}: single, 1 node(s), 2 run(s)")
    assert f'warning: sweeps["{FP8}"]: sweep has no cell' in err


def test_validate_reports_every_problem_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(cfg: dict[str, Any]) -> None:
        cfg["stpes"] = 1
        cfg["container"]["env"]["NCCL_IB_HCA"] = "x <changeme>"
        cfg["sweeps"]["BS=1,PRECISION=FP16"] = {}

    rc, out, err = run_cli(capsys, "config", "validate", str(write_config(tmp_path, broken)))
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 3
    assert all(line.startswith("cvs-tui: error: ") for line in lines)
    assert "Traceback" not in err


def test_validate_single_config_with_two_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_cli(
        capsys, "config", "validate", str(write_config(tmp_path, make_single)), "--nodes", "a,b"
    )
    assert rc == 2 and "single-node config" in err


def test_validate_tagged_image_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, lambda c: c["container"].update(image="img <changeme>"))
    rc, _, err = run_cli(capsys, "config", "validate", str(path), "--nodes", "a,b")
    assert rc == 2 and "container.image" in err


def test_schema_is_json_schema_allowing_comments(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "config", "schema")
    assert rc == 0
    schema = json.loads(out)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"gpu_name", "paths", "container", "train_params", "sweeps", "runs"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False and "^_" in schema["patternProperties"]


def test_config_list(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "config", "list")
    assert rc == 0
    for name, _ in list_shipped():
        assert name in out


def test_config_copy_copies_thresholds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shipped = list_shipped()
    if not shipped:
        pytest.fail("no shipped configs found")
    name, src = shipped[0]
    rc, _, err = run_cli(capsys, "config", "copy", name, str(tmp_path / "mine"))
    assert rc == 0, err
    assert (tmp_path / "mine" / src.name).read_bytes() == src.read_bytes()
    raw = json.loads(src.read_text())
    for thr in sibling_thresholds(src, raw.get("threshold_json")):
        assert (tmp_path / "mine" / thr.name).is_file()
    rc, _, err = run_cli(capsys, "config", "copy", name, str(tmp_path / "mine"))
    assert rc == 2 and "already exists" in err
    rc, _, _ = run_cli(capsys, "config", "copy", name, str(tmp_path / "mine"), "--force")
    assert rc == 0
    rc, _, err = run_cli(capsys, "config", "copy", "no-such-config")
    assert rc == 2 and "no shipped config" in err


def test_run_refuses_a_tagged_image_before_touching_a_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tagged = write_config(
        tmp_path / "t", lambda c: (make_single(c), c["container"].update(image="i <changeme>"))
    )
    rc, _, err = run_cli(capsys, "run", str(tagged), "--out", str(tmp_path / "run"))
    assert rc == 2 and "container.image" in err
    assert not (tmp_path / "run").exists()  # refused before anything was created or launched


def test_installed_console_script(tmp_path: Path) -> None:
    exe = REPO / ".venv" / "bin" / "cvs-tui"
    if not exe.exists():
        exe = Path(sys.executable).parent / "cvs-tui"
    path = write_config(tmp_path, lambda c: c.update(stpes=1))
    proc = subprocess.run(
        [str(exe), "config", "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "cvs-tui: error: stpes: unknown key 'stpes'; remove or rename it (comment keys start with _)"
    )
    ok = subprocess.run(
        [str(exe), "plan", str(write_config(tmp_path / "ok")), "--nodes", "h1,h2", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["mode"] == "distributed"


def test_cluster_and_config_problems_reported_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"nodes": ["h1"], "usrname": "x"}))
    path = write_config(tmp_path, lambda c: c.update(stpes=1))
    rc, _, err = run_cli(capsys, "config", "validate", str(path), "--cluster", str(cluster))
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "usrname" in lines[0] and "stpes" in lines[1]
