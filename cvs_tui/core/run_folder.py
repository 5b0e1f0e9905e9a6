"""The run folder: the one place that knows its layout and what a malformed one means.

A run (live, or `analyze --out`) leaves one folder::

    plan.json                  the resolved plan, secrets masked (Plan.display_dict)
    events.jsonl               every run event, one JSON object a line (what `attach` follows)
    results.json               the judged results, rewritten atomically after every stage
    report.html                the rendered report (junit.xml and summary.md beside it)
    logs/<slug>/node<rank>.log every node's full log, one folder per run
    exports/                   log views saved from the TUI
    console.log                the progress lines after the view was detached (`run`'s d in the quit dialog)
    .lock, error.log           the writer's lock; cvs-tui's own traceback when it failed (runner/suite.py)

A missing file is not an error here (a run in progress has no results.json yet); a file that is present
but unreadable or not what cvs-tui writes is a UserError naming the file and the fix. Run slugs read from
plan.json go through ``slugify`` again, so a hand-edited ``../../x`` cannot name a path outside the folder.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cvs_tui.core.atomic import write_atomic
from cvs_tui.core.errors import UserError
from cvs_tui.core.inputfile import PLAN_MAX, InputFileError, read_text_capped
from cvs_tui.core.jsonsafe import JsonInputError, loads_strict
from cvs_tui.core.slug import slugify

if TYPE_CHECKING:
    from cvs_tui.core.plan import Plan
    from cvs_tui.core.results import Results

PLAN = "plan.json"
EVENTS = "events.jsonl"
RESULTS = "results.json"
REPORT = "report.html"
LOGS = "logs"
EXPORTS = "exports"
CONSOLE_LOG = "console.log"
LOCK = ".lock"  # held (flock) by the cvs-tui process writing the folder, for as long as it runs
SLURM_STEPS = "slurm"  # the Slurm launcher's step folders: slurm/<slug>/node<rank>.sh/.log/.out
FILE_MODE = 0o644  # shared like any file the run writes (mkstemp makes 0600)

_NODE_LOG = re.compile(r"node(\d+)\.log$")


def step_stderr(node_log: Path) -> Path | None:
    """Where the Slurm launcher's step wrote that node's stderr (slurmstepd's lines), for a node log in
    a run folder: ``slurm/<slug>/node<rank>.out`` beside ``logs/<slug>/node<rank>.log``; else None."""
    if node_log.parent.parent.name != LOGS:
        return None
    return node_log.parent.parent.parent / SLURM_STEPS / node_log.parent.name / f"{node_log.stem}.out"


def node_logs_in(folder: Path) -> list[Path]:
    """The node logs of one folder in rank order: ``node<rank>.log`` by rank, else every ``*.log`` by name."""
    files = [p for p in folder.iterdir() if p.is_file()]
    ranked = [(int(m.group(1)), p) for p in files if (m := _NODE_LOG.fullmatch(p.name))]
    if ranked:
        return [p for _, p in sorted(ranked)]
    return sorted(p for p in files if p.suffix == ".log")


class RunFolder:
    """Paths and readers for one run folder; nothing is read until asked."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # -- paths -----------------------------------------------------------------------------------------
    @property
    def plan_path(self) -> Path:
        return self.path / PLAN

    @property
    def events_path(self) -> Path:
        return self.path / EVENTS

    @property
    def results_path(self) -> Path:
        return self.path / RESULTS

    @property
    def report_path(self) -> Path:
        return self.path / REPORT

    @property
    def logs_dir(self) -> Path:
        return self.path / LOGS

    @property
    def exports_dir(self) -> Path:
        return self.path / EXPORTS

    @property
    def console_log(self) -> Path:
        return self.path / CONSOLE_LOG

    def writer_running(self) -> bool | None:
        """Whether a cvs-tui process still holds the folder's lock (True), none does (False), or no lock
        was ever taken here (None: `analyze --follow` and older folders)."""
        try:
            fh = (self.path / LOCK).open("r", encoding="utf-8")
        except OSError:
            return None
        with fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError:
                return None
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            return False

    def node_log(self, slug: str, rank: int) -> Path:
        """``logs/<slug>/node<rank>.log``; the slug is sanitised, so the path stays inside the folder."""
        safe = slugify(slug)
        if not safe or rank < 0:
            raise ValueError(f"no node log for run slug {slug!r}, rank {rank}")
        return self.logs_dir / safe / f"node{rank}.log"

    def run_log(self, run_key: str, rank: int) -> Path:
        """The node log of a run named by its key (the slug plan.json gives it, else ``slugify(key)``)."""
        return self.node_log(self.slugs().get(run_key) or slugify(run_key), rank)

    # -- what is there ---------------------------------------------------------------------------------
    def looks_like_run(self) -> bool:
        """A folder holding a plan.json or a results.json (how scrub and compare recognise one)."""
        return self.path.is_dir() and (self.plan_path.is_file() or self.results_path.is_file())

    def require_events(self) -> Path:
        """The events file, or a UserError saying what is wrong (what `attach` needs)."""
        if not self.path.is_dir():
            raise UserError([f"{self.path}: not a directory; give the run folder (the one holding {EVENTS})"])
        if not self.events_path.is_file():
            raise UserError(
                [
                    f"{self.events_path}: not found; is {self.path} a cvs-tui run folder "
                    "(made by a run or analyze --out)?"
                ]
            )
        return self.events_path

    def node_logs(self) -> dict[str, list[Path]]:
        """Folder name under ``logs/`` -> its node logs in rank order (see :func:`node_logs_in`), by name."""
        if not self.logs_dir.is_dir():
            return {}
        return {d.name: node_logs_in(d) for d in sorted(self.logs_dir.iterdir()) if d.is_dir()}

    # -- plan.json -------------------------------------------------------------------------------------
    def plan_dict(self) -> dict[str, Any] | None:
        """plan.json as written (secrets masked), None when there is none."""
        p = self.plan_path
        try:
            data = loads_strict(read_text_capped(p, PLAN_MAX), finite=False)
        except FileNotFoundError:
            return None
        except InputFileError as exc:
            raise UserError(f"{exc}; plan.json must be the file a run wrote") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{p}: cannot read ({exc.__class__.__name__}: {exc})") from None
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{p}: not JSON (line {exc.lineno}: {exc.msg}); restore it or remove it from the run folder"
            ) from None
        except JsonInputError as exc:
            raise UserError(f"{p}: not a cvs-tui plan ({exc}); restore it or remove it") from None
        if not isinstance(data, dict):
            raise UserError(f"{p}: not a cvs-tui plan (a JSON object is expected)")
        return data

    def write_plan(self, plan: Plan) -> Path:
        """Write plan.json atomically (a reader never sees half a plan)."""
        text = json.dumps(plan.display_dict(), indent=2, default=str) + "\n"
        return _write_atomic(self.plan_path, text)

    def slugs(self) -> dict[str, str]:
        """Run key -> log folder name, as plan.json lists its runs (empty without a plan.json)."""
        plan = self.plan_dict()
        if plan is None or "runs" not in plan:
            return {}
        runs = plan["runs"]
        if not isinstance(runs, list):
            raise UserError(f"{self.plan_path}: runs: a list is expected")
        out: dict[str, str] = {}
        for i, r in enumerate(runs):
            key = r.get("key") if isinstance(r, dict) else None
            slug = r.get("slug") if isinstance(r, dict) else None
            if not isinstance(key, str) or not isinstance(slug, str):
                raise UserError(f"{self.plan_path}: runs[{i}]: a string key and slug are expected")
            safe = slugify(slug)
            if not safe:
                raise UserError(f"{self.plan_path}: runs[{i}].slug {slug!r} names no folder")
            out[key] = safe
        return out

    def hosts(self) -> list[str] | None:
        """Host names by rank from plan.json's nodes; None without a plan.json or a nodes list."""
        plan = self.plan_dict()
        if plan is None or "nodes" not in plan:
            return None
        nodes = plan["nodes"]
        if not isinstance(nodes, list) or not all(
            isinstance(n, dict) and isinstance(n.get("rank"), int) and isinstance(n.get("host"), str)
            for n in nodes
        ):
            raise UserError(f"{self.plan_path}: nodes: a list of {{rank, host}} objects is expected")
        return [str(n["host"]) for n in sorted(nodes, key=lambda n: int(n["rank"]))]

    def plan_info(self) -> dict[str, str]:
        """Header fields (config, model, mode, gpu) from plan.json; each one only when it is there."""
        plan = self.plan_dict() or {}
        info: dict[str, str] = {}
        if isinstance(plan.get("config_path"), str):
            info["config"] = Path(plan["config_path"]).name
        if isinstance(plan.get("model_label"), str) and plan["model_label"]:
            info["model"] = plan["model_label"]
        if isinstance(plan.get("mode"), str):
            nodes = plan.get("nodes")
            count = f" ({len(nodes)} nodes)" if isinstance(nodes, list) and nodes else ""
            info["mode"] = plan["mode"] + count
        if isinstance(plan.get("gpu_name"), str) and plan["gpu_name"]:
            per_node = plan.get("gpus_per_node")
            info["gpu"] = plan["gpu_name"] + (f" x{per_node}" if isinstance(per_node, int) else "")
        return info

    # -- results.json ----------------------------------------------------------------------------------
    def results(self) -> Results:
        """results.json; a missing or malformed one is a UserError naming the file (see load_results)."""
        from cvs_tui.core.results import load_results  # pydantic models: only when results are read

        return load_results(self.results_path)

    def write_results(self, results: Results) -> Path:
        """Write results.json atomically."""
        from cvs_tui.core.results import write_results

        return write_results(results, self.results_path)


def _write_atomic(dest: Path, text: str) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(dest, text, mode=FILE_MODE)
