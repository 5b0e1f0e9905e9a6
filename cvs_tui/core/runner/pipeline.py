"""The stage pipeline: one suite, every node at once, from preflight to teardown.

preflight → launch_container → rdma → tokenizer → maxtext_setup → smoke → each run → checkpoint_resume
→ report → teardown. A failed run does not stop the next; a failed preflight, container launch or smoke
skips what depends on it. Teardown always runs, also on failure, Ctrl-C and SIGTERM.

Each node's log is followed by one streaming reader (resuming at its byte offset after a disconnect),
copied byte for byte into the run folder and fed to the parser as it arrives; every event goes onto the
bus (front-ends, events.jsonl) and into the run state. A run ends as complete (every node exited 0),
failed (a fatal signature or NaN on any node, a non-zero exit, a node lost: the first node to fail is the
root cause) or hung (no progress for longer than the compile allowance before the first step, then
``hang_factor`` × the p95 step time, at least ``hang_min_s``). Metrics and verdicts come from
:func:`cvs_tui.core.analysis.finalize_run`, the same code `analyze` uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import posixpath
import re
import shlex
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cvs_tui.core.analysis import (
    base_results,
    finalize_run,
    judge_checkpoint_resume,
    stage_records,
    verdict_events,
)
from cvs_tui.core.bus import EventBus
from cvs_tui.core.config.host_config import gpu_mode
from cvs_tui.core.config.loader import LoadedConfig
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import (
    ErrorHit,
    ExitCodeEvent,
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    NonFiniteAbortEvent,
    RunEndEvent,
    RunOutcome,
    RunStartEvent,
    Severity,
    StageEvent,
    StageState,
    StepEvent,
    StepKind,
    SuiteEndEvent,
)
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.plan import Plan, PlannedRun
from cvs_tui.core.report import write_reports
from cvs_tui.core.results import Results, RunRecord, load_results, write_results
from cvs_tui.core.runner.containers import ContainerRuntime, ContainerSpec, runtime_for
from cvs_tui.core.runner.launcher import LaunchSpec, build_launcher, kill_group_command, launch_command
from cvs_tui.core.runner.tail import LogTailer
from cvs_tui.core.runner.transport import Transport, TransportError, connect_all, transport_for
from cvs_tui.core.state import RunState

_EXIT_LINE = re.compile(r"EXIT_CODE=(-?\d+)")
DOCKER_SOCKET_ARG = "docker_socket"  # container.runtime.args key: the nodes' Docker socket path
_LINES_BATCH = 200  # raw lines per LogLinesEvent at most
MIN_FREE_BYTES = 512 * 1024 * 1024  # free space wanted for the run folder and the nodes' output folders


@dataclass
class RunOptions:
    """Timeouts of the watchdog and of node commands (seconds)."""

    compile_allowance_s: float = 1800.0  # no step yet: start-up, data, compile
    hang_factor: float = 10.0  # after the first steps: k × p95 step time ...
    hang_min_s: float = 300.0  # ... but never less than this (checkpoint saves, evals)
    fail_grace_s: float = 15.0  # after a node failed: how long the others get to exit on their own
    connect_timeout_s: float = 30.0
    command_timeout_s: float = 120.0
    setup_timeout_s: float = 1800.0  # branch checkout + install command, tokenizer download
    resume: Path | None = None  # a run folder whose completed runs are kept


@dataclass
class _NodeWatch:
    rank: int
    host: str
    log_path: str  # on the node
    local_log: Path
    parser: NodeLogParser
    events: list[Any] = field(default_factory=list)  # everything parsed: what finalize_run judges
    exit_code: int | None = None
    first_fatal_at: float | None = None
    fatal_line: int | None = None
    lost: str | None = None
    last_progress: float = 0.0
    steps_seen: int = 0
    step_seconds: list[float] = field(default_factory=list)
    lines: int = 0
    partial: bytes = b""
    tailer: LogTailer | None = None
    state: NodeState = NodeState.STARTING
    stopping: bool = False  # cvs-tui is stopping it (a victim of another node, a hang, Ctrl-C)


class Suite:
    """Executes a plan. ``run()`` returns the results (also written to ``run_dir``)."""

    def __init__(
        self,
        loaded: LoadedConfig,
        plan: Plan,
        run_dir: Path,
        bus: EventBus,
        options: RunOptions | None = None,
    ) -> None:
        self.loaded = loaded
        self.plan = plan
        self.run_dir = run_dir
        self.bus = bus
        self.opt = options or RunOptions()
        self.state = RunState()
        self.results: Results = base_results(loaded, source="live", hosts=[n.host for n in plan.nodes])
        self.records: dict[str, RunRecord] = {}
        self.transports: list[Transport] = []
        self.runtimes: list[ContainerRuntime] = []
        # rank -> the rank whose runtime launches and removes the container it runs in
        self._container_owner: dict[int, int] = {}
        self.active: list[_NodeWatch] = []  # trainers that may still be running
        self.node_root = posixpath.dirname(plan.runs[0].base_output_directory) if plan.runs else ""
        self.scratch_root = posixpath.join(plan.paths.get("temp_dir") or self.node_root, plan.run_id)
        self._kept: dict[str, RunRecord] = {}
        self.interrupted = False
        if self.opt.resume is not None:
            self._kept = _completed_runs(self.opt.resume)

    # -- events ------------------------------------------------------------------------------------------
    def emit(self, ev: Any) -> None:
        self.state.apply(ev)
        self.bus.publish(ev)

    def stage(self, name: str, st: StageState, detail: str = "") -> None:
        self.emit(StageEvent(stage=name, state=st, detail=detail, at=time.time()))
        if st not in (StageState.RUNNING, StageState.PENDING):
            self.save()

    def save(self) -> None:
        """results.json as it stands (atomic): nothing is lost when the run is interrupted later."""
        self.results.stages = stage_records(self.state)
        self.results.runs = list(self.records.values())
        write_results(self.results, self.run_dir / "results.json")

    # -- the suite ---------------------------------------------------------------------------------------
    async def run(self) -> Results:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "plan.json").write_text(_json(self.plan.display_dict()), encoding="utf-8")
        # the order they will run in: checkpoint phases inside checkpoint_resume, the report last
        order = [s for s in self.plan.stages if s.name != "report"] + [
            s for s in self.plan.stages if s.name == "report"
        ]
        for s in order:
            self.emit(StageEvent(stage=s.name, state=StageState.PENDING, detail=s.reason, at=time.time()))
            if s.name == "checkpoint_resume" and s.enabled:
                for r in self.plan.runs:
                    if r.kind.startswith("ckpt_"):
                        self.emit(StageEvent(stage=f"run:{r.key}", state=StageState.PENDING, at=time.time()))
        try:
            await self._stages()
        except asyncio.CancelledError:
            self.interrupted = True
            self.stage("interrupted", StageState.FAILED, "stopped by the user (Ctrl-C / SIGTERM)")
            self._skip_rest("interrupted")
            raise
        finally:
            await asyncio.shield(self._finish())
        return self.results

    async def _finish(self) -> None:
        await self._teardown()
        self.stage("report", StageState.RUNNING)
        html = self.run_dir / "report.html"
        # marked done before rendering so the report shows its own stage finished; a failure to write
        # is recorded as such and re-raised
        self.stage("report", StageState.PASSED, str(html))
        try:
            paths = write_reports(self.results, self.run_dir)
        except Exception as exc:
            self.stage("report", StageState.FAILED, f"cannot write the reports: {exc}")
            raise
        passed = self.results_passed()
        self.emit(
            SuiteEndEvent(
                passed=passed,
                results_path=str(self.run_dir / "results.json"),
                report_path=str(paths["html"]),
                at=time.time(),
            )
        )

    def results_passed(self) -> bool:
        return self.results.passed and not self.interrupted

    async def _stages(self) -> None:
        if not await self._preflight():
            self._skip_rest("preflight failed")
            return
        if not await self._launch():
            self._skip_rest("the container did not start on every node")
            return
        await self._rdma()
        if not await self._tokenizer() or not await self._maxtext_setup():
            self._skip_rest("set-up failed")
            return
        runs = {r.kind: [] for r in self.plan.runs}  # type: dict[str, list[PlannedRun]]
        for r in self.plan.runs:
            runs[r.kind].append(r)
        if runs.get("smoke"):
            rec = await self._run_stage("smoke", runs["smoke"][0])
            if rec.status != "PASS":
                self._skip_rest(f"smoke failed: {rec.reason or 'see its verdicts'}")
                return
        for pr in runs.get("sweep", []):
            await self._run_stage(f"run:{pr.key}", pr)
        if runs.get("ckpt_phase1"):
            await self._checkpoint_resume(runs)

    def _skip_rest(self, why: str) -> None:
        done = {s.name for s in self.state.stages.values() if s.state != StageState.PENDING}
        names = [s.name for s in self.plan.stages] + [
            f"run:{pr.key}" for pr in self.plan.runs if pr.kind == "sweep" or pr.kind.startswith("ckpt_")
        ]
        for name in dict.fromkeys(names):  # each stage once, in plan order
            if name not in done and name not in ("report", "teardown"):
                self.stage(name, StageState.SKIPPED, why)

    # -- preflight ---------------------------------------------------------------------------------------
    async def _preflight(self) -> bool:
        self.stage("preflight", StageState.RUNNING)
        problems = list(self.plan.preflight_errors)
        free = shutil.disk_usage(self.run_dir).free
        if free < MIN_FREE_BYTES:
            problems.append(
                f"run folder {self.run_dir}: only {free >> 20} MiB free, need {MIN_FREE_BYTES >> 20}"
            )
        self.transports = [
            transport_for(
                n,
                user=self.plan.user,
                known_hosts=self.plan.known_hosts,
                verify_host_keys=self.plan.verify_host_keys,
                connect_timeout=self.opt.connect_timeout_s,
                env_vars=self.plan.cluster_env,
                password=self.plan.ssh_password.get_secret_value() if self.plan.ssh_password else None,
            )
            for n in self.plan.nodes
        ]
        errors = await connect_all(self.transports, timeout=self.opt.connect_timeout_s)
        for n, err in zip(self.plan.nodes, errors, strict=True):
            if err is not None:
                problems.append(f"node {n.rank} ({n.host}) unreachable: {err}")
        if not problems:
            try:
                spec = self._container_spec()
                kw = {"socket_path": self._docker_socket()} if self.plan.container_runtime == "docker" else {}
                self.runtimes = [
                    runtime_for(t, spec, self.plan.container_runtime, **kw) for t in self.transports
                ]
            except UserError as exc:
                problems += exc.problems
            else:
                problems += await self._node_checks()
                if not problems:
                    problems += await self._shared_daemons()
        if problems:
            self.stage("preflight", StageState.FAILED, "; ".join(problems))
            return False
        self.stage("preflight", StageState.PASSED, f"{len(self.plan.nodes)} node(s) ready")
        return True

    def _docker_socket(self) -> str | None:
        """``container.runtime.args.docker_socket``: the Docker socket on every node (else the default)."""
        value = self.plan.container_args.get(DOCKER_SOCKET_ARG)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise UserError(
                f"container.runtime.args.{DOCKER_SOCKET_ARG}: {value!r} is not a socket path; "
                "use e.g. /var/run/docker.sock"
            )
        return value.strip()

    def _container_spec(self) -> ContainerSpec | None:
        if self.plan.container_runtime != "docker":
            return None
        return ContainerSpec(
            name=self.plan.container_name,
            image=self.plan.container_image,
            # docker_socket says where the API is, not how to run the container
            args={k: v for k, v in self.plan.container_args.items() if k != DOCKER_SOCKET_ARG},
            gpu=gpu_mode(self.plan.gpu_name, cpu_only=_cpu(self.plan)),
            image_tar=self.loaded.config.container.image_tar or None,
            env=self.plan.runs[0].env if self.plan.runs else {},
            lifetime=self.plan.container_lifetime,
            # the run's node-side folders, same path inside and out: the node can follow the logs
            extra_binds=[f"{d}:{d}" for d in (self.node_root, self.scratch_root) if d],
            labels={"cvs-tui.run-id": self.plan.run_id, "cvs-tui.user": self.plan.user},
        )

    async def _node_checks(self) -> list[str]:
        dirs = [d for d in (self.node_root, self.scratch_root) if d]

        async def one(rank: int, t: Transport, rt: ContainerRuntime) -> list[str]:
            host = self.plan.nodes[rank].host
            out: list[str] = []
            try:
                if self.plan.container_runtime == "docker":
                    # GPU devices, then the image (pulled or loaded when missing, with progress)
                    found = await rt.prepare(lambda msg: self.stage("preflight", StageState.RUNNING, msg))
                    out += [f"node {rank} ({host}): {p}" for p in found]
                mk = " ".join(shlex.quote(d) for d in dirs)
                r = await t.run(f"mkdir -p -- {mk} && df -Pk -- {mk}", self.opt.command_timeout_s)
                if r.rc != 0:
                    out.append(
                        f"node {rank} ({host}): cannot create {', '.join(dirs)}: {r.err.strip()[:200]}"
                    )
                else:
                    for line in r.out.splitlines()[1:]:
                        cols = line.split()
                        if len(cols) >= 4 and cols[3].isdigit() and int(cols[3]) * 1024 < MIN_FREE_BYTES:
                            out.append(
                                f"node {rank} ({host}): only {int(cols[3]) >> 10} MiB free on {cols[-1]}; "
                                f"need {MIN_FREE_BYTES >> 20} MiB for the run's output"
                            )
            except (TransportError, Exception) as exc:
                out.append(f"node {rank} ({host}): {exc}")
            return out

        found = await asyncio.gather(
            *(one(i, t, rt) for i, (t, rt) in enumerate(zip(self.transports, self.runtimes, strict=True)))
        )
        return [p for ps in found for p in ps]

    async def _shared_daemons(self) -> list[str]:
        """Nodes whose Docker API is one daemon (two ranks on one machine) share one container.

        The container name carries user and run id but not the rank, so such nodes must not each
        create (or, per_run, replace) it: the first node of each daemon launches and removes it.
        """
        if self.plan.container_runtime != "docker":
            return []

        ids = await asyncio.gather(
            *(rt.daemon_id() for rt in self.runtimes),  # type: ignore[attr-defined]
            return_exceptions=True,
        )
        problems = [f"node {i}: {r}" for i, r in enumerate(ids) if isinstance(r, BaseException)]
        first: dict[str, int] = {}
        for i, d in enumerate(ids):
            if isinstance(d, str) and d:
                self._container_owner[i] = first.setdefault(d, i)
        return problems

    def _owns_container(self, rank: int) -> bool:
        return self._container_owner.get(rank, rank) == rank

    # -- container and set-up stages ----------------------------------------------------------------------
    async def _launch(self) -> bool:
        if not self.plan.stage("launch_container").enabled:
            self.stage("launch_container", StageState.SKIPPED, self.plan.stage("launch_container").reason)
            return True
        self.stage("launch_container", StageState.RUNNING)
        owners = [i for i in range(len(self.runtimes)) if self._owns_container(i)]
        res = dict(
            zip(
                owners,
                await asyncio.gather(*(self.runtimes[i].launch() for i in owners), return_exceptions=True),
                strict=True,
            )
        )
        bad = [f"node {i}: {r}" for i, r in res.items() if isinstance(r, BaseException)]
        if bad:
            self.stage("launch_container", StageState.FAILED, "; ".join(bad))
            return False
        self.stage(
            "launch_container",
            StageState.PASSED,
            ", ".join(
                f"node {i}: {res[i]}" if i in res else f"node {i}: shares node {self._container_owner[i]}'s"
                for i in range(len(self.runtimes))
            ),
        )
        return True

    async def _on_all(self, cmd: str, timeout: float) -> list[str]:
        """Run ``cmd`` where the trainer runs on every node; a problem line per node that failed."""

        async def one(i: int, rt: ContainerRuntime) -> str | None:
            try:
                r = await rt.exec(cmd, timeout=timeout)
            except Exception as exc:
                return f"node {i}: {exc}"
            if r.rc != 0:
                return f"node {i}: exit {r.rc}: {(r.err or r.out).strip()[-300:]}"
            return None

        res = await asyncio.gather(*(one(i, rt) for i, rt in enumerate(self.runtimes)))
        return [r for r in res if r]

    async def _rdma(self) -> None:
        st = self.plan.stage("rdma")
        if not st.enabled:
            self.stage("rdma", StageState.SKIPPED, st.reason)
            return
        self.stage("rdma", StageState.RUNNING)
        env = self.plan.runs[0].env if self.plan.runs else {}
        checks = [
            _exists_check(f"/sys/class/net/{name}", f"{var}: interface {name} not found")
            for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
            for name in _iface_list(env.get(var, ""))
        ]
        checks += [
            _exists_check(f"/sys/class/infiniband/{hca}", f"NCCL_IB_HCA: device {hca} not found")
            for hca in _iface_list(env.get("NCCL_IB_HCA", ""))
        ]
        if not checks:
            self.stage("rdma", StageState.PASSED, "no device names to check")
            return
        bad = await self._on_all("; ".join(checks), self.opt.command_timeout_s)
        if bad:
            self.stage("rdma", StageState.FAILED, "; ".join(bad))
        else:
            self.stage("rdma", StageState.PASSED, "configured interfaces and HCAs present on every node")

    async def _tokenizer(self) -> bool:
        st = self.plan.stage("tokenizer")
        if not st.enabled:
            self.stage("tokenizer", StageState.SKIPPED, st.reason)
            return True
        self.stage("tokenizer", StageState.RUNNING)
        token_file = self.plan.paths.get("hf_token_file", "")
        dest = self.plan.tokenizer_path or posixpath.join(
            self.plan.paths.get("models_dir", "/tmp"), "tokenizer"
        )
        # Tokenizer files only (no weights); the token is read from its file on the node, never echoed.
        py = (
            "import os,sys\n"
            "from huggingface_hub import snapshot_download\n"
            "tok=open(sys.argv[3]).read().strip() if os.path.exists(sys.argv[3]) else None\n"
            "snapshot_download(sys.argv[1], local_dir=sys.argv[2], token=tok,"
            " allow_patterns=['tokenizer*','*.model','*.tiktoken','special_tokens_map.json','config.json'])\n"
        )
        cmd = " ".join(
            shlex.quote(x) for x in (self.plan.python, "-c", py, self.plan.hf_model_id, dest, token_file)
        )
        bad = await self._on_all(cmd, self.opt.setup_timeout_s)
        if bad:
            self.stage("tokenizer", StageState.FAILED, "; ".join(bad))
            return False
        self.stage("tokenizer", StageState.PASSED, f"{self.plan.hf_model_id} tokenizer in {dest}")
        return True

    async def _maxtext_setup(self) -> bool:
        st = self.plan.stage("maxtext_setup")
        if not st.enabled:
            self.stage("maxtext_setup", StageState.SKIPPED, st.reason)
            return True
        self.stage("maxtext_setup", StageState.RUNNING)
        root = shlex.quote(self.plan.maxtext_root)
        parts = [f"cd {root}"]
        branch = self.plan.maxtext_branch
        if branch:
            b = shlex.quote(branch)
            parts.append(
                f"git reset --hard -q && (git fetch --all --tags -q || true) && git checkout -q {b} && "
                f'test "$(git rev-parse --abbrev-ref HEAD)" = {b}'
            )
        if self.plan.maxtext_install_cmd:
            # verbatim by design: the install command is a shell command the operator wrote
            parts.append(self.plan.maxtext_install_cmd)
        bad = await self._on_all(" && ".join(parts), self.opt.setup_timeout_s)
        if bad:
            self.stage("maxtext_setup", StageState.FAILED, "; ".join(bad))
            return False
        self.stage("maxtext_setup", StageState.PASSED, f"branch {branch or '(image)'} ready on every node")
        return True

    # -- runs ----------------------------------------------------------------------------------------------
    async def _run_stage(self, stage: str, pr: PlannedRun) -> RunRecord:
        kept = self._kept.get(pr.key)
        if kept is not None:
            self.records[pr.key] = kept
            self.stage(stage, StageState.PASSED, f"kept from {self.opt.resume} (already complete)")
            return kept
        self.stage(stage, StageState.RUNNING, pr.key)
        rec = await self._execute(pr)
        self.records[pr.key] = rec
        detail = rec.reason if rec.outcome != RunOutcome.COMPLETE.value else _failed_metrics(rec)
        self.stage(stage, StageState.PASSED if rec.status == "PASS" else StageState.FAILED, detail)
        return rec

    async def _checkpoint_resume(self, runs: dict[str, list[PlannedRun]]) -> None:
        self.stage("checkpoint_resume", StageState.RUNNING)
        first = runs["ckpt_phase1"][0]
        # phase 1 must start from nothing: MaxText refuses to train to step N over a later checkpoint
        stale = shlex.quote(posixpath.join(first.base_output_directory, first.run_name, "checkpoints"))
        for t in self.transports:
            with contextlib.suppress(Exception):
                await t.run(f"rm -rf -- {stale}", self.opt.command_timeout_s)
        p1 = await self._run_stage("run:CKPT-1", first)
        if p1.outcome != RunOutcome.COMPLETE.value:
            self.stage("checkpoint_resume", StageState.FAILED, f"phase 1 did not complete: {p1.reason}")
            for pr in runs.get("ckpt_phase2", []) + runs.get("ckpt_reference", []):
                self.stage(f"run:{pr.key}", StageState.SKIPPED, "checkpoint phase 1 did not complete")
            return
        for pr in runs.get("ckpt_phase2", []) + runs.get("ckpt_reference", []):
            await self._run_stage(f"run:{pr.key}", pr)
        judge_checkpoint_resume(self.loaded, self.records)
        self.save()
        p2 = self.records.get(runs["ckpt_phase2"][0].key) if runs.get("ckpt_phase2") else None
        if self.plan.checkpoint_resume.get("delete_ckpt_dir", True):
            ckpt = posixpath.join(
                runs["ckpt_phase1"][0].base_output_directory, runs["ckpt_phase1"][0].run_name
            )
            with contextlib.suppress(Exception):
                await self.transports[0].run(
                    f"rm -rf -- {shlex.quote(ckpt)}/checkpoints", self.opt.command_timeout_s
                )
        ok = p2 is not None and p2.status == "PASS"
        msgs = [v.message for v in (p2.verdicts if p2 else []) if v.metric.startswith("checkpoint.")]
        self.stage("checkpoint_resume", StageState.PASSED if ok else StageState.FAILED, "; ".join(msgs))

    async def _execute(self, pr: PlannedRun) -> RunRecord:
        started = time.time()
        local_dir = self.run_dir / "logs" / pr.slug
        local_dir.mkdir(parents=True, exist_ok=True)
        node_logs_dir = posixpath.join(self.node_root, "cvs-logs", pr.slug)
        scratch = posixpath.join(self.scratch_root, pr.slug)
        watches: list[_NodeWatch] = []
        for n in self.plan.nodes:
            local = local_dir / f"node{n.rank}.log"
            local.write_bytes(b"")
            watches.append(
                _NodeWatch(
                    rank=n.rank,
                    host=n.host,
                    log_path=posixpath.join(node_logs_dir, f"node{n.rank}.log"),
                    local_log=local,
                    parser=NodeLogParser(error_patterns=self.plan.error_patterns),
                    last_progress=started,
                )
            )
        self.emit(
            RunStartEvent(
                run=pr.key, total_steps=pr.steps, nodes=tuple(n.host for n in self.plan.nodes), at=started
            )
        )
        outcome, reason, root = RunOutcome.COMPLETE, "", None
        self.active = watches  # teardown stops whatever started, even if this is interrupted
        launched = await asyncio.gather(
            *(self._start_node(pr, w, node_logs_dir, scratch) for w in watches), return_exceptions=True
        )
        bad = [(w, r) for w, r in zip(watches, launched, strict=True) if isinstance(r, BaseException)]
        self.active = [w for w, r in zip(watches, launched, strict=True) if not isinstance(r, BaseException)]
        if bad:
            w, err = bad[0]
            outcome, reason, root = (
                RunOutcome.FAILED,
                f"node {w.rank} ({w.host}): launch failed: {err}",
                w.rank,
            )
            for w2, e2 in bad:
                self._node_status(pr.key, w2.rank, NodeState.FAILED, f"launch failed: {e2}")
            await self._stop_trainers(self.active)
        else:
            try:
                outcome, reason, root = await self._watch(pr, watches)
            except asyncio.CancelledError:
                # judge what ran so far, then let the interruption go on to teardown
                self.records[pr.key] = self._finalize(
                    pr, watches, RunOutcome.INTERRUPTED, "interrupted", None, started
                )
                self.active = []
                raise
        self.active = []
        return self._finalize(pr, watches, outcome, reason, root, started)

    def _finalize(
        self,
        pr: PlannedRun,
        watches: list[_NodeWatch],
        outcome: RunOutcome,
        reason: str,
        root: int | None,
        started: float,
    ) -> RunRecord:
        for w in watches:
            for ev in w.parser.finish():
                w.events.append(ev)
                self.emit(NodeLogEvent(run=pr.key, node=w.rank, event=ev))
        rec = finalize_run(
            self.loaded,
            pr.key,
            [w.events for w in watches],
            exit_codes=[w.exit_code for w in watches],
            outcome=outcome,
            reason=reason,
            root_cause_node=root,
            hosts=[w.host for w in watches],
            node_logs=[w.local_log for w in watches],
            node_lines=[w.parser.lines_seen for w in watches],
            started_at=started,
            ended_at=time.time(),
        )
        for ev in verdict_events(rec):
            self.emit(ev)
        self.emit(
            RunEndEvent(
                run=pr.key,
                outcome=RunOutcome(rec.outcome),
                reason=rec.reason,
                root_cause_node=rec.root_cause_node,
                at=time.time(),
            )
        )
        return rec

    async def _start_node(self, pr: PlannedRun, w: _NodeWatch, logs_dir: str, scratch: str) -> None:
        t = self.transports[w.rank]
        rt = self.runtimes[w.rank]
        yaml_path = posixpath.join(scratch, f"maxtext.node{w.rank}.yml")
        script = posixpath.join(scratch, f"launch.node{w.rank}.sh")
        log = w.log_path
        dirs = " ".join(shlex.quote(d) for d in (logs_dir, scratch))
        stale = " ".join(shlex.quote(p) for p in (log, f"{log}.exit", f"{log}.pid"))
        r = await t.run(f"mkdir -p -- {dirs} && rm -f -- {stale}", self.opt.command_timeout_s)
        if r.rc != 0:
            raise RuntimeError(f"cannot prepare {logs_dir}: {r.err.strip()[:200]}")
        await t.write_file(yaml_path, pr.yaml_text)
        # unbuffered stdout keeps print() records in order with the stderr log lines, and live
        env = {"PYTHONUNBUFFERED": "1", **pr.env, **pr.node_env[w.rank]}
        spec = LaunchSpec(
            log_path=log,
            config_path=yaml_path,
            train_script_paths=self.plan.train_script_paths,
            python=self.plan.python,
            env=env,
            workdir=self.plan.maxtext_root if self.plan.container_runtime == "docker" else None,
            hf_token_file=self.plan.paths.get("hf_token_file")
            if self.plan.stage("tokenizer").enabled
            else None,
            label=f"run {pr.key} node {w.rank}",
            pre_env=self.plan.cluster_env,
            post_env=self.plan.launcher_env,
        )
        await t.write_file(script, build_launcher(spec), 0o755)
        await rt.start_detached(launch_command(script))
        self._node_status(pr.key, w.rank, NodeState.STARTING)

    async def _watch(self, pr: PlannedRun, watches: list[_NodeWatch]) -> tuple[RunOutcome, str, int | None]:
        readers = [asyncio.create_task(self._follow(pr, w)) for w in watches]
        outcome, reason, root = RunOutcome.COMPLETE, "", None
        failed_at: float | None = None
        try:
            while True:
                await asyncio.sleep(0.25)
                now = time.time()
                if all(w.exit_code is not None or w.lost for w in watches):
                    lost = [w for w in watches if w.lost]
                    if lost and outcome is RunOutcome.COMPLETE:
                        outcome, reason, root = (
                            RunOutcome.FAILED,
                            f"node {lost[0].rank} ({lost[0].host}) lost: {lost[0].lost}",
                            lost[0].rank,
                        )
                    break
                culprit = self._first_failure(watches)
                if culprit is not None and failed_at is None:
                    failed_at = now
                    outcome, reason, root = RunOutcome.FAILED, culprit[1], culprit[0]
                if failed_at is not None and now - failed_at > self.opt.fail_grace_s:
                    break  # the others are victims, waiting on a dead peer: stop them
                hung = self._hung(watches, now) if failed_at is None else None
                if hung is not None:
                    outcome, reason, root = RunOutcome.HUNG, hung[1], hung[0]
                    self._node_status(pr.key, hung[0], NodeState.HUNG, hung[1])
                    break
        finally:
            still = [w for w in watches if w.exit_code is None and not w.lost]
            if still:
                for w in still:
                    w.stopping = True  # their exit status is ours (TERM), not a failure of theirs
                await self._stop_trainers(still)
                for w in still:
                    if w.state is not NodeState.STOPPED:
                        w.state = NodeState.STOPPED
                        self._node_status(pr.key, w.rank, NodeState.STOPPED, "stopped by cvs-tui")
                await self._wait_exit(still, 20.0)
            for w in watches:
                if w.tailer is not None:
                    w.tailer.stop()
            await asyncio.gather(*readers, return_exceptions=True)
            for w in watches:
                await self._drain(pr, w)
        return outcome, reason, root

    def _first_failure(self, watches: Sequence[_NodeWatch]) -> tuple[int, str] | None:
        cands: list[tuple[float, int, str]] = []
        for w in watches:
            if w.first_fatal_at is not None:
                cands.append((w.first_fatal_at, w.rank, f"node {w.rank}: fatal error at line {w.fatal_line}"))
            elif w.exit_code not in (None, 0):
                cands.append((w.last_progress, w.rank, f"node {w.rank} exited with code {w.exit_code}"))
            elif w.lost:
                cands.append((w.last_progress, w.rank, f"node {w.rank} ({w.host}) lost: {w.lost}"))
        return min(cands)[1:] if cands else None

    def _hung(self, watches: Sequence[_NodeWatch], now: float) -> tuple[int, str] | None:
        for w in watches:
            if w.exit_code is not None:
                continue
            if w.steps_seen == 0:
                limit, what = self.opt.compile_allowance_s, "the first step (compile allowance)"
            else:
                secs = sorted(w.step_seconds[-200:])
                p95 = secs[min(len(secs) - 1, int(0.95 * len(secs)))] if secs else 0.0
                limit = max(self.opt.hang_min_s, self.opt.hang_factor * p95)
                what = (
                    f"the next step ({self.opt.hang_factor:g} x p95 step time, "
                    f"at least {self.opt.hang_min_s:g} s)"
                )
            if now - w.last_progress > limit:
                return (
                    w.rank,
                    f"node {w.rank}: no progress for {now - w.last_progress:.0f} s waiting for {what}",
                )
        return None

    async def _follow(self, pr: PlannedRun, w: _NodeWatch) -> None:
        w.tailer = LogTailer(self.transports[w.rank], w.log_path)
        try:
            async for chunk in w.tailer.chunks():
                self._ingest(pr, w, chunk)
                if w.exit_code is not None:
                    return
        except TransportError as exc:
            w.lost = str(exc)
            self._node_status(pr.key, w.rank, NodeState.UNREACHABLE, str(exc))

    async def _drain(self, pr: PlannedRun, w: _NodeWatch) -> None:
        """After the reader stopped: whatever the node wrote since (its last lines, EXIT_CODE)."""
        if w.tailer is None or w.lost:
            return
        with contextlib.suppress(TransportError, OSError):
            rest = await w.tailer.read_rest()
            if rest:
                self._ingest(pr, w, rest)

    def _ingest(self, pr: PlannedRun, w: _NodeWatch, chunk: bytes) -> None:
        with w.local_log.open("ab") as fh:
            fh.write(chunk)
        data = w.partial + chunk
        cut = data.rfind(b"\n")
        if cut >= 0:
            complete, w.partial = data[: cut + 1], data[cut + 1 :]
            lines = complete.decode("utf-8", "replace").split("\n")[:-1]
            for i in range(0, len(lines), _LINES_BATCH):
                batch = tuple(lines[i : i + _LINES_BATCH])
                self.emit(LogLinesEvent(run=pr.key, node=w.rank, first_line=w.lines + i + 1, lines=batch))
            w.lines += len(lines)
            # The launcher's own last line: the parser holds a record until the next one starts, so the
            # exit is taken from the raw line at once.
            if w.exit_code is None and lines and (m := _EXIT_LINE.fullmatch(lines[-1].strip())):
                self._exited(pr, w, int(m.group(1)))
        else:
            w.partial = data
        now = time.time()
        for ev in w.parser.feed(chunk):
            w.events.append(ev)
            self.emit(NodeLogEvent(run=pr.key, node=w.rank, event=ev))
            if isinstance(ev, StepEvent):
                w.last_progress = now
                if ev.kind is StepKind.TRAIN:
                    w.steps_seen += 1
                    if ev.seconds is not None and math.isfinite(ev.seconds) and w.steps_seen > 3:
                        w.step_seconds.append(ev.seconds)
                if w.state is not NodeState.TRAINING and w.first_fatal_at is None:
                    w.state = NodeState.TRAINING
                    self._node_status(pr.key, w.rank, NodeState.TRAINING)
            elif isinstance(ev, ErrorHit | NonFiniteAbortEvent) and w.first_fatal_at is None:
                if isinstance(ev, NonFiniteAbortEvent) or ev.severity is Severity.FATAL:
                    w.first_fatal_at, w.fatal_line = now, ev.line
                    w.state = NodeState.FAILED
                    self._node_status(pr.key, w.rank, NodeState.FAILED, f"fatal at line {ev.line}")
            elif isinstance(ev, ExitCodeEvent) and w.exit_code is None:
                self._exited(pr, w, ev.code)

    def _exited(self, pr: PlannedRun, w: _NodeWatch, code: int) -> None:
        w.exit_code = code
        if code == 0 and w.first_fatal_at is None:
            w.state = NodeState.DONE
            self._node_status(pr.key, w.rank, NodeState.DONE, "exit 0")
        elif w.stopping and w.first_fatal_at is None:
            w.state = NodeState.STOPPED
            self._node_status(pr.key, w.rank, NodeState.STOPPED, f"stopped by cvs-tui (exit {code})")
        elif w.state is not NodeState.FAILED:
            w.state = NodeState.FAILED
            self._node_status(pr.key, w.rank, NodeState.FAILED, f"exit {code}")

    async def _stop_trainers(self, watches: Sequence[_NodeWatch]) -> None:
        async def one(w: _NodeWatch) -> None:
            with contextlib.suppress(Exception):
                await self.runtimes[w.rank].exec(
                    kill_group_command(w.log_path), timeout=self.opt.command_timeout_s
                )

        await asyncio.gather(*(one(w) for w in watches))

    async def _wait_exit(self, watches: Sequence[_NodeWatch], timeout: float) -> None:
        end = time.time() + timeout
        while time.time() < end and any(w.exit_code is None and not w.lost for w in watches):
            await asyncio.sleep(0.2)

    # -- teardown ------------------------------------------------------------------------------------------
    async def _teardown(self) -> None:
        self.stage("teardown", StageState.RUNNING)
        problems: list[str] = []
        if self.active:
            await self._stop_trainers(self.active)
            self.active = []
        owners = [i for i in range(len(self.runtimes)) if self._owns_container(i)]
        res = dict(
            zip(
                owners,
                await asyncio.gather(*(self.runtimes[i].teardown() for i in owners), return_exceptions=True),
                strict=True,
            )
        )
        for i, r in res.items():
            if isinstance(r, BaseException):
                problems.append(f"node {i}: {r}")
            elif r is False:
                problems.append(f"node {i}: container {self.plan.container_name} is still there")
        for rt in self.runtimes:
            with contextlib.suppress(Exception):
                await rt.close()
        for t in self.transports:
            with contextlib.suppress(Exception):
                await t.close()
        if problems:
            self.stage("teardown", StageState.FAILED, "; ".join(problems))
        else:
            self.stage("teardown", StageState.PASSED, "nothing left running on any node")

    def _node_status(self, run: str, rank: int, st: NodeState, detail: str = "") -> None:
        host = self.plan.nodes[rank].host if rank < len(self.plan.nodes) else f"node{rank}"
        self.emit(NodeStatusEvent(run=run, node=rank, host=host, state=st, detail=detail, at=time.time()))


def _cpu(plan: Plan) -> bool:
    hardware = [str(r.maxtext_config.get("hardware", "")).lower() for r in plan.runs]
    return bool(hardware) and all(h == "cpu" for h in hardware)


def _exists_check(path: str, message: str) -> str:
    return f"test -e {shlex.quote(path)} || {{ echo {shlex.quote(message)} >&2; exit 1; }}"


def _iface_list(value: str) -> list[str]:
    """Device names from an NCCL-style list: `^` / `=` prefixes and `:port` suffixes dropped."""
    out = []
    for part in value.lstrip("^=").split(","):
        name = part.strip().split(":")[0]
        if name:
            out.append(name)
    return out


def _failed_metrics(rec: RunRecord) -> str:
    fails = [v.message for v in rec.verdicts if v.status == "FAIL"]
    return "; ".join(fails)[:400]


def _completed_runs(run_dir: Path) -> dict[str, RunRecord]:
    """Runs of an earlier attempt that completed (kept by --resume)."""
    path = run_dir / "results.json"
    if not path.exists():
        raise UserError(f"--resume {run_dir}: no results.json there; give a cvs-tui run folder")
    res = load_results(path)
    return {
        r.key: r for r in res.runs if r.outcome == RunOutcome.COMPLETE.value and r.kind in ("smoke", "sweep")
    }


def _json(d: dict[str, Any]) -> str:
    import json

    return json.dumps(d, indent=2, sort_keys=False, default=str) + "\n"
