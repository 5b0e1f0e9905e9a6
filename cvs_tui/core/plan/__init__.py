"""The resolved plan: config + nodes -> exactly what will run where, with which env and YAML.

The plan layer sits below the runner and imports nothing from it (an import-linter contract):

- ``model``: the frozen models (Plan, PlannedRun, PlannedStage, ...) and small value helpers;
- ``stages``: each stage's plan rows, in the suite's order (the runner's stages only run);
- ``build``: ``build_plan``, config + nodes -> Plan;
- ``text``: ``format_plan``, the plan for a terminal;
- ``secrets``: ``secret_values``, what must be masked wherever node output goes.
"""

from cvs_tui.core.plan.build import RUN_DIR_PLACEHOLDER, build_plan
from cvs_tui.core.plan.model import (
    CKPT1_KEY,
    CKPT2_KEY,
    CKPT_REF_KEY,
    HOST_KEYS_OFF,
    MASK,
    PLAN_SCHEMA_VERSION,
    SMOKE_KEY,
    SPECIAL_SLUGS,
    JudgeSpec,
    Plan,
    PlannedNode,
    PlannedRun,
    PlannedSlurm,
    PlannedStage,
    RunKind,
    SlurmFiles,
    mask_env,
    new_run_id,
    precision_of,
    xla_flags_value,
    yaml_dump,
)
from cvs_tui.core.plan.secrets import secret_values
from cvs_tui.core.plan.stages import ORDER, PlanInput, plan_stages
from cvs_tui.core.plan.text import format_plan

__all__ = [
    "CKPT1_KEY",
    "CKPT2_KEY",
    "CKPT_REF_KEY",
    "HOST_KEYS_OFF",
    "MASK",
    "ORDER",
    "PLAN_SCHEMA_VERSION",
    "RUN_DIR_PLACEHOLDER",
    "SMOKE_KEY",
    "SPECIAL_SLUGS",
    "JudgeSpec",
    "Plan",
    "PlanInput",
    "PlannedNode",
    "PlannedRun",
    "PlannedSlurm",
    "PlannedStage",
    "RunKind",
    "SlurmFiles",
    "build_plan",
    "format_plan",
    "mask_env",
    "new_run_id",
    "plan_stages",
    "precision_of",
    "secret_values",
    "xla_flags_value",
    "yaml_dump",
]
