"""Compare's inputs: a results.json, a run folder holding one, or raw node logs judged with a config.

Each run's ``maxtext_config`` comes from a plan: the run folder's plan.json, or for raw logs the plan
`analyze` judges them with, so a run is fingerprinted with the recipe it was planned with.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cvs_tui.core.errors import UserError
from cvs_tui.core.results import Results, load_results
from cvs_tui.core.run_folder import RunFolder


@dataclass(slots=True)
class RunInput:
    """One run as read from disk: its results and what the config or plan said about it."""

    label: str
    results: Results
    image: str | None = None
    maxtext: dict[str, dict[str, Any]] = field(default_factory=dict)  # run key -> maxtext_config


def _image_of(runtime: str | None, image: str | None) -> str | None:
    if runtime == "host":
        return "host (no container)"
    return image or None


def _from_plan(folder: Path, inp: RunInput) -> None:
    """The image and each run's maxtext_config from a live run's plan.json, when it has one."""
    try:
        plan = json.loads(RunFolder(folder).plan_path.read_text(encoding="utf-8"))
        inp.image = _image_of(plan.get("container_runtime"), plan.get("container_image"))
        for r in plan.get("runs", []):
            if r.get("kind") != "ckpt_phase2" or r["key"] not in inp.maxtext:
                inp.maxtext[str(r["key"])] = dict(r.get("maxtext_config") or {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return


def load_input(path: str, *, config: str | None, side: str, run_key: str | None = None) -> RunInput:
    """A results.json, a run folder holding one, or raw node logs analysed with ``config``."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"--{side}: {p}: no such file or folder")
    if p.is_file() and p.suffix == ".json":
        inp = RunInput(str(p), load_results(p))
        _from_plan(p.parent, inp)
        return inp
    if p.is_dir() and RunFolder(p).results_path.is_file():
        inp = RunInput(str(p), RunFolder(p).results())
        _from_plan(p, inp)
        return inp
    if config is None:
        raise UserError(
            f"--{side}: {p} is neither a results.json nor a run folder holding one; to compare raw node "
            "logs add --config CONFIG (the config the run used)"
        )
    from cvs_tui.core.config.loader import load_config
    from cvs_tui.core.sources.inputs import plan_for
    from cvs_tui.core.sources.offline import analyze_paths

    plan = plan_for(load_config(config), [p])
    results = analyze_paths(plan, [p], run_key)
    inp = RunInput(str(p), results, image=_image_of(plan.container_runtime, plan.container_image))
    for run in results.runs:
        inp.maxtext[run.key] = dict(plan.run(run.key).maxtext_config)
    return inp


def load_side(
    paths: Sequence[str], *, config: str | None, side: str, run_key: str | None = None
) -> list[RunInput]:
    """Every run of one side; raw logs are analysed with ``config`` (``run_key`` names their run)."""
    if not paths:
        raise UserError(f"--{side}: give at least one results.json, run folder or node log")
    return [load_input(p, config=config, side=side, run_key=run_key) for p in paths]


__all__ = ["RunInput", "load_input", "load_side"]
