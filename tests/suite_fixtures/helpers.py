"""Set-up for the suite tests: a per-test node folder, a config built from the stand-in fixture,
a cluster file for the loopback sshd nodes, and ways to run the suite (CLI subprocess or in-process).

The nodes share this machine's filesystem, so a test can read each node's own log and list its
processes directly to compare them with what cvs-tui recorded.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _runner_infra import infra

from cvs_tui.core.bus import EventBus
from cvs_tui.core.cluster import load_cluster
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.plan import build_plan, new_run_id
from cvs_tui.core.runner.suite import RunOptions, Suite

FIXTURES = Path(__file__).resolve().parent
TRAINER = FIXTURES / "standin_trainer.sh"
BASE_CONFIG = FIXTURES / "standin_distributed.json"
BASE_THRESHOLDS = FIXTURES / "standin_distributed_threshold.json"
SWEEP = "BS=1,PRECISION=BF16,SL=128"
SLUG = "BS_1_PRECISION_BF16_SL_128"
CLI = Path(sys.executable).with_name("cvs-tui")
UNREACHABLE_HOST = "127.0.0.9"  # on `lo` like the nodes, but nothing listens there


@dataclass
class Setup:
    root: Path  # the nodes' folder for this test (shared_fs), owned by the node user
    config: Path
    cluster: Path
    out: Path  # the run folder on the controller

    def results(self) -> dict[str, Any]:
        return json.loads((self.out / "results.json").read_text())

    def events(self) -> list[dict[str, Any]]:
        path = self.out / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def run_record(self, key: str = SWEEP) -> dict[str, Any]:
        runs = {r["key"]: r for r in self.results()["runs"]}
        return runs[key]

    def stage(self, name: str) -> dict[str, Any]:
        return {s["name"]: s for s in self.results()["stages"]}[name]

    def run_id(self) -> str:
        return json.loads((self.out / "plan.json").read_text())["run_id"]

    def node_log(self, rank: int, slug: str = SLUG) -> Path:
        """The node's own log (on the node), as the launcher wrote it."""
        return self.root / "runs" / self.run_id() / "cvs-logs" / slug / f"node{rank}.log"

    def copied_log(self, rank: int, slug: str = SLUG) -> Path:
        """The node's log as cvs-tui copied it into the run folder."""
        return self.out / "logs" / slug / f"node{rank}.log"

    def marker(self) -> str:
        """A string found in the command line of every trainer this test starts."""
        return str(self.root / "bin" / TRAINER.name)


def make_setup(
    tmp_path: Path,
    *,
    runtime: str = "docker",
    env: dict[str, str] | None = None,
    maxtext: dict[str, Any] | None = None,
    sweeps: dict[str, dict[str, Any]] | None = None,
    thresholds: dict[str, Any] | None = None,
    smoke: bool = False,
    hosts: list[str] | None = None,
) -> Setup:
    inf = infra()
    root = Path(inf.scratch) / f"engine-{uuid.uuid4().hex[:8]}"
    (root / "bin").mkdir(parents=True)
    shutil.copy(TRAINER, root / "bin" / TRAINER.name)
    for p in (root, root / "bin", root / "bin" / TRAINER.name):
        shutil.chown(p, inf.user, inf.user)  # the node user creates the run's folders under it

    cfg = json.loads(BASE_CONFIG.read_text())
    cfg["paths"]["shared_fs"] = str(root)
    cfg["container"]["runtime"]["args"]["docker_socket"] = inf.remote_docker_sock
    if runtime == "host":
        cfg["container"]["runtime"] = {"name": "host", "args": {}}
    cfg["container"]["env"].update(env or {})
    cfg["train_params"]["maxtext_config"].update(maxtext or {})
    cfg["smoke"]["enabled"] = smoke
    th = json.loads(BASE_THRESHOLDS.read_text())
    if sweeps is not None:
        cfg["sweeps"] = sweeps
        cell = th[SWEEP]
        th = {k: copy.deepcopy(cell) for k in sweeps} | (thresholds or {})
    cfg_dir = tmp_path / "cfg"
    cfg_dir.mkdir()
    config = cfg_dir / "engine.json"
    cfg["threshold_json"] = "engine_threshold.json"
    config.write_text(json.dumps(cfg, indent=2))
    (cfg_dir / "engine_threshold.json").write_text(json.dumps(th, indent=2))

    cluster = cfg_dir / "cluster.json"
    cluster.write_text(
        json.dumps(
            {
                "username": inf.user,
                "priv_key_file": inf.key,
                "port": inf.port,
                "known_hosts": inf.known_hosts,
                "nodes": hosts or inf.nodes[:2],
            }
        )
    )
    return Setup(root=root, config=config, cluster=cluster, out=tmp_path / "run")


def cli(setup: Setup, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`cvs-tui CONFIG --cluster F --no-ui --out DIR ARGS` as a subprocess; its exit code is the answer."""
    return subprocess.run(
        [
            str(CLI),
            str(setup.config),
            "--cluster",
            str(setup.cluster),
            "--no-ui",
            "--out",
            str(setup.out),
            *list(args),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_cli(setup: Setup, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(CLI),
            str(setup.config),
            "--cluster",
            str(setup.cluster),
            "--no-ui",
            "--out",
            str(setup.out),
            *list(args),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def make_suite(setup: Setup, options: RunOptions | None = None) -> Suite:
    cluster = load_cluster(setup.cluster)
    loaded = load_config(setup.config, user=cluster.user)
    plan = build_plan(loaded, cluster, out_dir=setup.out, run_id=new_run_id())
    setup.out.mkdir(parents=True, exist_ok=True)
    return Suite(plan, setup.out, EventBus(setup.out / "events.jsonl"), options)


def run_suite(setup: Setup, options: RunOptions | None = None) -> Suite:
    suite = make_suite(setup, options)
    try:
        asyncio.run(suite.run())
    finally:
        suite.bus.close()
    return suite


def fast_options(**kw: Any) -> RunOptions:
    """Short watchdog limits so failure paths take seconds."""
    base: dict[str, Any] = {
        "compile_allowance_s": 30.0,
        "hang_factor": 2.0,
        "hang_min_s": 10.0,
        "fail_grace_s": 2.0,
        "connect_timeout_s": 10.0,
        "command_timeout_s": 30.0,
    }
    base.update(kw)
    return RunOptions(**base)


def containers_of(run_id: str) -> list[str]:
    """Containers (any state) that a run created, by its run-id label, on the nodes' Docker daemon."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=cvs-tui.run-id={run_id}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "DOCKER_HOST": infra().docker_host},
    ).stdout
    return out.split()


def processes_with(marker: str) -> list[str]:
    """Live processes (any user, inside containers too) whose command line contains ``marker``."""
    out = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    hits = []
    for line in out.splitlines():
        pid, stat, args = ([*line.strip().split(None, 2), "", ""])[:3]
        if marker in args and not stat.startswith("Z") and int(pid) != os.getpid():
            hits.append(line.strip())
    return hits


def section(log: str, name: str) -> str:
    """The text the stand-in printed between `STANDIN <name> BEGIN` and `STANDIN <name> END`."""
    begin, end = f"STANDIN {name} BEGIN\n", f"STANDIN {name} END\n"
    start = log.index(begin) + len(begin)
    return log[start : log.index(end, start)]


def remove_scratch_tree(setup: Setup) -> None:
    """Remove the test's node folder (the nodes share this filesystem; containers write as root)."""
    shutil.rmtree(setup.root, ignore_errors=True)
