"""Builders for small, valid CVS configs (and their threshold files) that tests then break on purpose."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

BF16 = "BS=3,PRECISION=BF16,SL=8192"
FP8 = "BS=3,PRECISION=FP8,SL=8192"

BASE_CONFIG: dict[str, Any] = {
    "_comment": "a root comment",
    "gpu_name": "mi3xx",
    "threshold_json": "sample_threshold.json",
    "enforce_thresholds": True,
    "gpus_per_node": 8,
    "paths": {
        "shared_fs": "/home/{user-id}",
        "models_dir": "{shared_fs}/cache/maxtext",
        "log_dir": "{shared_fs}/LOGS/jaxmaxtext",
        "hf_token_file": "{shared_fs}/.hf_token",
        "temp_dir": "/tmp/{user-id}/jaxmaxtext",
    },
    "container": {
        "lifetime": "per_run",
        "name": "rocm-jaxmaxtext-test",
        "image": "rocm/jax-training:maxtext-v26.4",
        "runtime": {
            "name": "docker",
            "args": {"network": "host", "volumes": ["/home/{user-id}:/home/{user-id}"]},
        },
        "env": {
            "_env_comment": "an env comment",
            "GPU_MAX_HW_QUEUES": "2",
            "NCCL_IB_HCA": "rdma0,rdma1",
            "NCCL_SOCKET_IFNAME": "eno0",
            "GLOO_SOCKET_IFNAME": "eno0",
            "NCCL_IB_GID_INDEX": "3",
            "JAX_COORDINATOR_PORT": "12346",
        },
    },
    "_train_params_comment": "another comment",
    "train_params": {
        "hf_model_id": "NousResearch/Meta-Llama-3.1-8B",
        "train_script_paths": ["/workspace/maxtext/src/MaxText/train.py"],
        "maxtext_config": {
            "base_config": "base.yml",
            "model_name": "llama3.1-8b",
            "tokenizer_path": "{paths.models_dir}/llama",
            "hardware": "gpu",
            "steps": 30,
            "enable_checkpointing": False,
            "dataset_type": "synthetic",
            "quantization": "",
            "per_device_batch_size": 1,
            "max_target_length": 2048,
        },
        "xla_flags": {"xla_gpu_autotune_level": "0", "xla_gpu_enable_latency_hiding_scheduler": True},
    },
    "smoke": {"_c": "smoke comment", "enabled": True},
    "sweeps": {
        BF16: {"_comment": "extra maxtext_config overrides go here"},
        FP8: {"_comment": "per-sweep steps", "steps": 10},
    },
    "runs": [BF16, FP8],
}

BASE_THRESHOLDS: dict[str, Any] = {
    "_comment": "sample thresholds",
    BF16: {
        "_node_count_comment": "captured on 2 nodes",
        "training.tflops_per_sec_per_gpu": {"kind": "min", "value": 260.0},
        "training.tokens_per_sec_per_gpu": {"kind": "min", "value": 1217.0},
        "training.final_loss": {"kind": "max", "value": 15.0},
        "training.loss_decreased": {"kind": "min", "value": 1},
        "training.step_time_p95_ms": {"kind": "info", "value": 3600000.0},
    },
    FP8: {
        "training.tflops_per_sec_per_gpu": {"kind": "min", "value": 300.0},
        "training.tokens_per_sec_per_gpu": {"kind": "info", "value": 1836.0},
        "training.final_loss": {"kind": "max", "value": 15.0},
        "training.loss_decreased": {"kind": "min", "value": 1},
    },
}


def write_config(
    folder: Path,
    mutate: Callable[[dict[str, Any]], None] | None = None,
    *,
    thresholds: dict[str, Any] | None = None,
    mutate_thresholds: Callable[[dict[str, Any]], None] | None = None,
    name: str = "sample.json",
) -> Path:
    """Write BASE_CONFIG (after ``mutate``) and its threshold file into ``folder``; return the config path."""
    cfg = copy.deepcopy(BASE_CONFIG)
    if mutate:
        mutate(cfg)
    thr = copy.deepcopy(BASE_THRESHOLDS if thresholds is None else thresholds)
    if mutate_thresholds:
        mutate_thresholds(thr)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sample_threshold.json").write_text(json.dumps(thr, indent=2))
    path = folder / name
    path.write_text(json.dumps(cfg, indent=2))
    return path


def make_single(cfg: dict[str, Any]) -> None:
    """Turn the sample into a single-node config (no NCCL RDMA device vars)."""
    for k in ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_GID_INDEX"):
        cfg["container"]["env"].pop(k)
