"""The suite's stages, in the order they run: a new stage is one module here plus one line in STAGES,
and its plan rows one function in :mod:`cvs_tui.core.plan.stages` ORDER (same name, same place).

Each entry is ``"module:Class"`` (a module of this package), imported on first use. Closing stages
(report, teardown) run after the others on every exit path, last first.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cvs_tui.core.runner.stages.base import Stage

STAGES: tuple[str, ...] = (
    "preflight:Preflight",
    "node_health:NodeHealthStage",
    "container:LaunchContainer",
    "rdma:Rdma",
    "tokenizer:Tokenizer",
    "maxtext_setup:MaxTextSetup",
    "smoke:Smoke",
    "sweeps:Sweeps",
    "checkpoint_resume:CheckpointResume",
    "report:Report",
    "teardown:Teardown",
)


@cache
def registered() -> tuple[Stage, ...]:
    """One instance of every registered stage, in order."""
    out: list[Stage] = []
    for entry in STAGES:
        module, _, cls = entry.partition(":")
        out.append(getattr(importlib.import_module(f"{__name__}.{module}"), cls)())
    return tuple(out)
