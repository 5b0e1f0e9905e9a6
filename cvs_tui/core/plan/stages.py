"""The plan's stage rows: what each stage of the suite will do, or why it is skipped.

The runner's stages (``core/runner/stages/``) only run; their rows are planned here, from the config,
the nodes and the planned runs alone, so the plan layer imports nothing from the runner. ``ORDER`` is
the order the suite runs them in; a test holds it equal to the runner's stage registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cvs_tui.core.cluster import Cluster
from cvs_tui.core.config.loader import LoadedConfig
from cvs_tui.core.plan.model import PlannedRun, PlannedStage, precision_of


@dataclass(frozen=True)
class PlanInput:
    """What a stage is planned from: the loaded config, the nodes and the runs already planned."""

    loaded: LoadedConfig
    cluster: Cluster
    out_dir: Path
    runs: Sequence[PlannedRun]
    container_name: str


def _cpu_only(inp: PlanInput) -> bool:
    return bool(inp.runs) and all(
        str(r.maxtext_config.get("hardware", "")).lower() == "cpu" for r in inp.runs
    )


def _row(name: str, enabled: bool, reason: str) -> list[PlannedStage]:
    return [PlannedStage(name=name, enabled=enabled, reason=reason)]


def preflight(inp: PlanInput) -> list[PlannedStage]:
    if inp.loaded.preflight_errors:
        why = f"{len(inp.loaded.preflight_errors)} problem(s) to fix first: nothing will be launched"
    else:
        where = "the local machine" if inp.cluster.is_local else f"{len(inp.cluster.nodes)} node(s) over SSH"
        why = f"reach {where}; check image, paths and train script before anything starts"
    return _row("preflight", True, why)


def node_health(inp: PlanInput) -> list[PlannedStage]:
    h = inp.loaded.config.health
    tele = (
        "telemetry off (hardware: cpu)"
        if _cpu_only(inp)
        else f"GPU telemetry every {h.telemetry_interval_s or 5:g} s"
    )
    if h.kernel_log == "off":
        why = f"kernel log off (every node not checked); {tele}"
    else:
        how = "with sudo -n" if h.kernel_log == "sudo" else "as the login user"
        why = f"follow /dev/kmsg {how} on {len(inp.cluster.nodes)} node(s); {tele}"
    return _row("node_health", True, why)


def launch_container(inp: PlanInput) -> list[PlannedStage]:
    c = inp.loaded.config.container
    if c.runtime.name == "host":
        return _row("launch_container", False, "runtime host: no container")
    if c.lifetime == "no_launch":
        return _row(
            "launch_container", False, f"lifetime no_launch: uses the running container {inp.container_name}"
        )
    why = (
        f"{c.runtime.name} container {inp.container_name} from {c.image} on {len(inp.cluster.nodes)} node(s)"
    )
    return _row("launch_container", True, why)


def rdma(inp: PlanInput) -> list[PlannedStage]:
    if inp.loaded.mode == "distributed" and _cpu_only(inp):
        return _row("rdma", False, "hardware cpu: no RDMA devices to check")
    if inp.loaded.mode == "distributed":
        return _row("rdma", True, "distributed config: check RDMA devices")
    return _row("rdma", False, "single-node config: no RDMA")


def tokenizer(inp: PlanInput) -> list[PlannedStage]:
    needs = [r.key for r in inp.runs if r.maxtext_config.get("dataset_type") != "synthetic"]
    if not needs:
        return _row("tokenizer", False, "every run uses dataset_type synthetic")
    tp = inp.loaded.config.train_params
    dest = tp.maxtext_config.get("tokenizer_path")
    return _row("tokenizer", True, f"{', '.join(needs)} use real data: download {tp.hf_model_id} to {dest}")


def maxtext_setup(inp: PlanInput) -> list[PlannedStage]:
    tp = inp.loaded.config.train_params
    if not (tp.maxtext_branch or tp.maxtext_install_cmd):
        return _row(
            "maxtext_setup", False, "no maxtext_branch or maxtext_install_cmd: the image's MaxText as is"
        )
    what = []
    if tp.maxtext_branch:
        what.append(f"check out {tp.maxtext_branch}")
    if tp.maxtext_install_cmd:
        what.append(f"run {tp.maxtext_install_cmd!r}")
    return _row("maxtext_setup", True, f"in {tp.maxtext_root}: {' and '.join(what)}")


def smoke(inp: PlanInput) -> list[PlannedStage]:
    s = inp.loaded.config.smoke
    if not s.enabled:
        return _row("smoke", False, "smoke.enabled is false")
    run = next((r for r in inp.runs if r.kind == "smoke"), None)
    smoke_precision = precision_of(run.maxtext_config).upper() if run is not None else "BF16"
    why = (
        f"{s.steps} steps, batch {s.per_device_batch_size}, "
        f"seqlen {s.max_target_length}, {smoke_precision}; a failure stops the suite"
    )
    return _row("smoke", True, why)


def sweeps(inp: PlanInput) -> list[PlannedStage]:
    """One row per selected sweep, named ``run:<sweep key>``."""
    return [
        PlannedStage(name=f"run:{spec.key}", enabled=True, reason=f"{spec.steps} steps")
        for spec in inp.loaded.runs
    ]


def checkpoint_resume(inp: PlanInput) -> list[PlannedStage]:
    cr = inp.loaded.config.checkpoint_resume
    if not cr.enabled:
        return _row("checkpoint_resume", False, "opt-in: checkpoint_resume.enabled is false")
    first = next(r for r in inp.runs if r.kind == "ckpt_phase1")  # planned whenever enabled
    why = (
        f"on {first.source_sweep}: {cr.steps_before_ckpt} steps saving every "
        f"{cr.checkpoint_period}, resume to {cr.steps_before_ckpt + cr.steps_after_resume}, "
        + (
            "compare with an uninterrupted reference"
            if cr.reference_run
            else "compare with phase 1 (reference_run is false)"
        )
    )
    return _row("checkpoint_resume", True, why)


def report(inp: PlanInput) -> list[PlannedStage]:
    return _row("report", True, f"HTML, JSON, JUnit and Markdown in {inp.out_dir}")


def teardown(inp: PlanInput) -> list[PlannedStage]:
    c = inp.loaded.config.container
    if c.runtime.name == "host":
        return _row("teardown", False, "runtime host: no container")
    if c.lifetime != "per_run":
        return _row("teardown", False, f"lifetime {c.lifetime}: the container stays")
    return _row("teardown", True, f"remove {inp.container_name}")


# The suite's stages in the order they run, each with its row planner. The runner's registry
# (runner/stages/__init__.py STAGES) lists the same names in the same order (tests/plan/test_plan_stages.py);
# "run" is the sweeps stage, whose rows are run:<sweep key>.
ORDER: tuple[tuple[str, Callable[[PlanInput], list[PlannedStage]]], ...] = (
    ("preflight", preflight),
    ("node_health", node_health),
    ("launch_container", launch_container),
    ("rdma", rdma),
    ("tokenizer", tokenizer),
    ("maxtext_setup", maxtext_setup),
    ("smoke", smoke),
    ("run", sweeps),
    ("checkpoint_resume", checkpoint_resume),
    ("report", report),
    ("teardown", teardown),
)


def plan_stages(inp: PlanInput) -> list[PlannedStage]:
    """The plan's stage rows: every stage's, in the order the suite runs them."""
    return [row for _, rows in ORDER for row in rows(inp)]
