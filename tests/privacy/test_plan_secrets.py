"""Audit 3 L14 (PW03, PW04): the SSH password is among the values masked in node output, and a value
shaped like a secret (an `hf_` token, a GitHub token, an AWS key) is masked in `plan`, plan.json, the
cluster's dict and node output whatever its variable is called (`env_vars.MY_CREDS`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from _analysis_samples import load_local

from cvs_tui.core.cluster import cluster_to_dict, local_cluster
from cvs_tui.core.plan import build_plan, secret_values
from cvs_tui.core.plan.text import format_plan

TOKENS = [
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "AKIAIOSFODNN7EXAMPLE",
]


@pytest.mark.parametrize("token", TOKENS)
def test_pw04_a_token_in_a_plainly_named_env_var_is_masked(tmp_path: Path, token: str) -> None:
    loaded = load_local(tmp_path)
    env = {"MY_CREDS": token, "NCCL_DEBUG": "INFO", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".9"}
    cluster = dataclasses.replace(local_cluster(1), env_vars=env)
    plan = build_plan(loaded, cluster, out_dir=tmp_path, run_id="t")
    shown = json.dumps(plan.display_dict()) + format_plan(plan) + json.dumps(cluster_to_dict(cluster))
    assert token not in shown
    assert token in secret_values(plan)  # masked in node output too
    # ordinary values stay readable
    assert plan.display_dict()["cluster_env"]["NCCL_DEBUG"] == "INFO"
    assert "INFO" not in secret_values(plan) and ".9" not in secret_values(plan)


def test_pw03_the_ssh_password_is_masked_in_node_output(tmp_path: Path) -> None:
    loaded = load_local(tmp_path)
    cluster = dataclasses.replace(local_cluster(1), password="Sup3r-S3cret-pw")
    plan = build_plan(loaded, cluster, out_dir=tmp_path, run_id="t")
    assert "Sup3r-S3cret-pw" in secret_values(plan)
    assert "Sup3r-S3cret-pw" not in json.dumps(plan.display_dict()) + format_plan(plan)
