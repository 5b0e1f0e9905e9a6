"""Set-up for the suite through Slurm: the stand-in config on the host runtime, a run folder the two
Slurm nodes share (one machine), and ways to run the suite (CLI inside the cluster's namespace, or
in-process with the cluster's client)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _slurm_infra import slurm
from suite_fixtures.helpers import BASE_CONFIG, BASE_THRESHOLDS, SLUG, SWEEP, TRAINER

from cvs_tui.core.bus import EventBus
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.plan import Plan, build_plan, new_run_id
from cvs_tui.core.runner.slurm import target as st
from cvs_tui.core.runner.suite import RunOptions, Suite

CLI = Path(sys.executable).with_name("cvs-tui")


@dataclass
class SlurmSetup:
    root: Path  # shared_fs of the config: the trainer and the nodes' output folders
    config: Path
    out: Path  # the run folder (shared by the Slurm nodes)

    def results(self) -> dict[str, Any]:
        return json.loads((self.out / "results.json").read_text())

    def events(self) -> list[dict[str, Any]]:
        lines = (self.out / "events.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def run_record(self, key: str = SWEEP) -> dict[str, Any]:
        return {r["key"]: r for r in self.results()["runs"]}[key]

    def stage(self, name: str) -> dict[str, Any]:
        return {s["name"]: s for s in self.results()["stages"]}[name]

    def plan(self) -> dict[str, Any]:
        return json.loads((self.out / "plan.json").read_text())

    def node_log(self, rank: int, slug: str = SLUG) -> Path:
        """The rank's own log, as its launcher wrote it in the job step."""
        return self.out / "slurm" / slug / f"node{rank}.log"

    def copied_log(self, rank: int, slug: str = SLUG) -> Path:
        return self.out / "logs" / slug / f"node{rank}.log"

    def marker(self) -> str:
        return str(self.root / "bin" / TRAINER.name)


def make_setup(tmp_path: Path, *, env: dict[str, str] | None = None, steps: int = 8) -> SlurmSetup:
    root = tmp_path / f"nodes-{uuid.uuid4().hex[:8]}"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / TRAINER.name).write_bytes(TRAINER.read_bytes())
    cfg = json.loads(BASE_CONFIG.read_text())
    cfg["paths"]["shared_fs"] = str(root)
    cfg["container"]["runtime"] = {"name": "host", "args": {}}
    cfg["container"]["env"].update(env or {})
    cfg["sweeps"] = {SWEEP: {"steps": steps}}
    cfg_dir = tmp_path / "cfg"
    cfg_dir.mkdir()
    cfg["threshold_json"] = "engine_threshold.json"
    (cfg_dir / "engine.json").write_text(json.dumps(cfg, indent=2))
    (cfg_dir / "engine_threshold.json").write_text(BASE_THRESHOLDS.read_text())
    return SlurmSetup(root=root, config=cfg_dir / "engine.json", out=tmp_path / "run")


def cli_argv(*args: str) -> list[str]:
    """``cvs-tui ARGS`` inside the Slurm cluster's network namespace, as a login node would run it."""
    return [*slurm().prefix, "env", f"SLURM_CONF={slurm().conf}", str(CLI), *args]


def cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


def run_cli(setup: SlurmSetup, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(str(setup.config), "--slurm", "--no-ui", "--out", str(setup.out), *args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=cli_env())


def start_cli(setup: SlurmSetup, *args: str) -> subprocess.Popen[str]:
    argv = cli_argv(str(setup.config), "--slurm", "--no-ui", "--out", str(setup.out), *args)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env())


async def slurm_plan(setup: SlurmSetup, salloc_args: list[str]) -> Plan:
    """Request an allocation and plan on it, as `cvs-tui CONFIG --slurm --slurm-args ...` does."""
    loaded = load_config(setup.config)
    alloc, addresses = await st.allocate(slurm().client(), {}, salloc_args)
    cluster = st.allocation_cluster(alloc, addresses)
    plan = build_plan(loaded, cluster, out_dir=setup.out, run_id=new_run_id())
    return st.slurm_plan(plan, alloc, salloc_args)


def fast_options(**kw: Any) -> RunOptions:
    base: dict[str, Any] = {
        "compile_allowance_s": 30.0,
        "hang_factor": 2.0,
        "hang_min_s": 10.0,
        "fail_grace_s": 2.0,
        "command_timeout_s": 30.0,
        "slurm_grace_s": 3.0,
        "slurm_client": slurm().client(),
    }
    return RunOptions(**(base | kw))


async def run_suite_async(setup: SlurmSetup, plan: Plan, options: RunOptions) -> Suite:
    setup.out.mkdir(parents=True, exist_ok=True)
    suite = Suite(plan, setup.out, EventBus(setup.out / "events.jsonl"), options)
    try:
        await suite.run()
    finally:
        suite.bus.close()
    return suite


def run_suite(setup: SlurmSetup, options: RunOptions | None = None, nodes: int = 2) -> Suite:
    async def go() -> Suite:
        plan = await slurm_plan(setup, ["-N", str(nodes), "-J", f"cvs-suite-{uuid.uuid4().hex[:6]}"])
        return await run_suite_async(setup, plan, options or fast_options())

    return asyncio.run(go())


def squeue_jobs() -> list[str]:
    return slurm().cmd("squeue", "-h", "-o", "%i %j %T").splitlines()


def processes_with(marker: str) -> list[str]:
    """Live processes whose full command line contains ``marker`` (read from /proc: `ps` cuts long
    command lines to the terminal width, and these paths are long)."""
    hits = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            args = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in args and state != "Z":
            hits.append(f"{d.name} {args.strip()}")
    return hits
