"""The results model: everything a report needs, versioned and written atomically.

The schema is documented in docs/results-schema.md; bump ``SCHEMA_VERSION`` on any incompatible change.
Non-finite numbers never reach JSON as NaN: a non-finite loss is stored as ``null`` with its text in
``loss_text`` (``"nan"``, ``"inf"``), and metrics carry ``absent`` + ``reason``.

Long because it is the one results.json schema every report, ``analyze`` and ``compare`` read: a short
pydantic model per record, plus the tally that says PASS or FAIL the same way in every view.
"""

from __future__ import annotations

import json
import os
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cvs_tui.core.atomic import FILE_MODE, write_atomic
from cvs_tui.core.errors import UserError
from cvs_tui.core.inputfile import RESULTS_MAX, InputFileError, read_text_capped
from cvs_tui.core.jsonsafe import JsonInputError, loads_strict
from cvs_tui.core.textsafe import mask_secrets

SCHEMA_VERSION = 2
# Versions this code reads: 2 added node health (additive, with defaults), so a version-1 file loads.
READABLE_SCHEMA_VERSIONS = (1, 2)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepPoint(_Model):
    step: int
    kind: str = "train"
    loss: float | None
    loss_text: str | None = None  # set only when the logged loss is NaN/Inf
    seconds: float | None = None
    tokens_per_sec: float | None = None  # per device, as logged
    tflops_per_sec: float | None = None  # per device, as logged
    line: int


class EvalPoint(_Model):
    step: int
    loss: float | None
    dialect: str
    line: int


class CheckpointRecord(_Model):
    action: str
    step: int | None = None
    seconds: float | None = None
    line: int


class ErrorRecord(_Model):
    node: int
    line: int
    name: str
    severity: str  # fatal | warning
    origin: str
    text: str
    context: list[str] = Field(default_factory=list)  # log lines around ``line``
    context_first_line: int | None = None


class ExcludedStep(_Model):
    step: int
    reason: str


def step_ranges(steps: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending distinct ``steps`` as inclusive ranges of consecutive steps."""
    out: list[tuple[int, int]] = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


class StepSpans:
    """Membership in a window's steps held as inclusive ranges (a bounded window lists only some)."""

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self._lo = [a for a, _ in ranges]
        self._hi = [b for _, b in ranges]

    def __contains__(self, step: object) -> bool:
        if not isinstance(step, int):
            return False
        i = bisect_right(self._lo, step) - 1
        return i >= 0 and step <= self._hi[i]


def _unset(v: object) -> bool:
    return v is None


class WindowRecord(_Model):
    status: Literal["ok", "inconclusive"]
    reason: str = ""
    steps: list[int] = Field(default_factory=list)
    excluded: list[ExcludedStep] = Field(default_factory=list)
    min_clean_steps: int
    warmup_steps: int
    # A run's window from ``cvs-tui analyze`` longer than the series cap lists in ``steps`` every k-th
    # step and the last (judge.series); then these hold every step: how many, and as inclusive ranges of
    # consecutive steps. Left out of the JSON when unset, so an unbounded window reads as before.
    step_count: int | None = Field(default=None, exclude_if=_unset)
    step_ranges: list[tuple[int, int]] | None = Field(default=None, exclude_if=_unset)

    @property
    def clean_steps(self) -> int:
        """How many steps the window has (``steps`` may list only some)."""
        return len(self.steps) if self.step_count is None else self.step_count

    @property
    def first_step(self) -> int | None:
        if self.step_ranges is not None:
            return self.step_ranges[0][0] if self.step_ranges else None
        return min(self.steps) if self.steps else None

    @property
    def last_step(self) -> int | None:
        if self.step_ranges is not None:
            return self.step_ranges[-1][1] if self.step_ranges else None
        return max(self.steps) if self.steps else None

    def spans(self) -> StepSpans:
        """Every window step, for ``step in window.spans()``."""
        if self.step_ranges is not None:
            return StepSpans(self.step_ranges)
        return StepSpans(step_ranges(sorted(set(self.steps))))


class StallRecord(_Model):
    """A stall of one node (docs/metrics.md, "Stalls and goodput")."""

    step: int
    seconds: float  # the logged interval (a log gap: the gap between the step lines)
    lost_seconds: float  # seconds - the node's median step seconds
    source: str  # "seconds" | "log gap"
    cause: str  # "during the async save of step 20 (...)" | "unexplained"
    line: int


class NodeRecord(_Model):
    rank: int
    host: str = ""
    log_path: str | None = None
    lines: int = 0
    exit_code: int | None = None
    steps_logged: int = 0
    last_step: int | None = None
    window_steps: int = 0
    step_time_p50_ms: float | None = None
    step_time_mean_ms: float | None = None
    tokens_per_sec_per_device: float | None = None
    tflops_per_sec_per_device: float | None = None
    lag_pct: float | None = None
    straggler: bool = False
    fatal_errors: int = 0
    warnings: int = 0
    steps: list[StepPoint] = Field(default_factory=list)
    evals: list[EvalPoint] = Field(default_factory=list)
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)
    window: WindowRecord | None = None
    stalls: list[StallRecord] = Field(default_factory=list)


class MetricRecord(_Model):
    name: str
    value: float | None
    unit: str
    text: str
    absent: str | None = None  # feature_off | inconclusive | not_produced | non_finite
    reason: str = ""


class VerdictRecord(_Model):
    metric: str
    status: Literal["PASS", "FAIL", "RECORD", "N/A"]
    expected: str
    actual: float | None
    actual_text: str
    unit: str
    message: str = ""
    gated: bool = False


class Environment(_Model):
    jax: str | None = None
    jaxlib: str | None = None
    backend: str | None = None
    num_devices: int | None = None
    mesh_shape: list[int] | None = None
    devices_per_node: int | None = None
    parameters_billions: float | None = None
    tflops_per_step: float | None = None
    memory_estimate_gb: float | None = None
    step_logger_source: str | None = None  # `file.py:NNN` of the step logger: the MaxText vintage


class LossCurveRecord(_Model):
    points: list[tuple[int, float]] = Field(default_factory=list)
    slope: float | None = None
    max_slope: float
    enforce: bool


class HealthFindingRecord(_Model):
    """A kernel-log line on a node that matched a health signature, with the run/step it fell in."""

    node: int
    host: str = ""
    signature: str
    severity: str  # fatal | warning
    line: str  # the kernel message as logged
    kernel_time: float  # seconds since the node's boot
    wall_time: float
    detail: str = ""
    run: str | None = None
    step: int | None = None  # the step in progress on that node; None before its first step


class GpuSampleRecord(_Model):
    gpu: int
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    gfx_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    ecc_correctable: int | None = None
    ecc_uncorrectable: int | None = None
    throttled: bool | None = None
    pcie_width: int | None = None
    pcie_speed_gts: float | None = None
    throttle_reasons: list[str] | None = None
    gfx_clock_max_mhz: float | None = None
    pcie_width_max: int | None = None
    pcie_speed_max_gts: float | None = None
    retired_pages: int | None = None
    remapped_rows: int | None = None
    repair_pending: bool | None = None
    remap_failed: bool | None = None
    unreadable: list[str] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list)  # of unreadable: the fields the driver did not know


class TelemetryPoint(_Model):
    """One sample of a node, averaged over its GPUs (the report's chart); None where none reported.

    The fields after ``temp_c`` feed the straggler's cause (health/straggler.py): the mean graphics
    clock, whether any GPU said it was throttled, the narrowest/slowest PCIe link, ECC totals summed."""

    at: float
    util_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    gfx_clock_mhz: float | None = None
    throttled: bool | None = None
    pcie_width: int | None = None
    pcie_speed_gts: float | None = None
    ecc_correctable: int | None = None
    ecc_uncorrectable: int | None = None
    throttle_reasons: list[str] | None = None
    gfx_clock_max_mhz: float | None = None
    pcie_width_max: int | None = None
    pcie_speed_max_gts: float | None = None
    retired_pages: int | None = None
    remapped_rows: int | None = None
    unreadable: list[str] = Field(default_factory=list)


class HostPoint(_Model):
    """One sample of a node's host (health/host.py): CPU steal and pressure, and the trainer's own
    share of time throttled by its CPU quota or waiting for a CPU; None where it could not be read."""

    at: float
    steal_pct: float | None = None
    cpu_pressure_pct: float | None = None  # /proc/pressure/cpu "some" avg10
    trainer_throttled_pct: float | None = None
    trainer_wait_pct: float | None = None


class StragglerRecord(_Model):
    """The node that held a run back, why, and what the run lost (docs/metrics.md, "Straggler cause")."""

    node: int
    host: str = ""
    cause: str  # a health.straggler.Cause value
    evidence: str
    window_start: float
    window_end: float
    slowdown_pct: float  # the job's step time in the window over its healthy step time, minus 100
    what_if_pct: float  # tokens/s gained over the whole run without this node's slowdown


class NodeHealthRecord(_Model):
    """One node's health over the whole suite: ``not checked`` (with why) is never ``ok``."""

    rank: int
    host: str = ""
    state: str = "not checked"  # HealthState value: ok | warn | fail | not checked
    reason: str = ""
    kernel_log: str = "plain"  # how it was read: plain | sudo | off
    findings: list[HealthFindingRecord] = Field(default_factory=list)
    telemetry_tool: str | None = None
    telemetry_error: str = ""
    telemetry_last: list[GpuSampleRecord] = Field(default_factory=list)  # the latest sample per GPU
    telemetry_first: list[GpuSampleRecord] = Field(default_factory=list)  # the first (ECC comparison)
    telemetry: list[TelemetryPoint] = Field(default_factory=list)
    host_timing: list[HostPoint] = Field(default_factory=list)


class RunRecord(_Model):
    key: str
    slug: str
    kind: str  # smoke | sweep | ckpt_phase1 | ckpt_phase2 | ckpt_reference
    total_steps: int
    outcome: str  # RunOutcome value
    reason: str = ""
    root_cause_node: int | None = None
    status: Literal["PASS", "FAIL"]
    started_at: float | None = None
    ended_at: float | None = None
    threshold_cell: str | None = None
    nodes: list[NodeRecord] = Field(default_factory=list)
    window: WindowRecord
    metrics: list[MetricRecord] = Field(default_factory=list)
    verdicts: list[VerdictRecord] = Field(default_factory=list)
    errors: list[ErrorRecord] = Field(default_factory=list)
    loss_curve: LossCurveRecord | None = None
    environment: Environment = Field(default_factory=Environment)
    notes: list[str] = Field(default_factory=list)
    health_findings: list[HealthFindingRecord] = Field(default_factory=list)  # those attributed to it
    straggler_cause: StragglerRecord | None = None  # the slowed node and why (None: none found)

    def metric(self, name: str) -> MetricRecord | None:
        return next((m for m in self.metrics if m.name == name), None)


class StageRecord(_Model):
    name: str
    state: str  # StageState value
    detail: str = ""
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def seconds(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at


class Provenance(_Model):
    """Where the results came from, for the report's provenance block; None where it was not recorded
    (older files, or a fact the controller cannot know, such as a remote node's driver)."""

    command: str = ""  # the cvs-tui command line, shell-quoted
    config_sha256: str | None = None
    threshold_sha256: str | None = None
    image: str | None = None  # the container image (None for runtime "host")
    image_digest: str | None = None  # the image's repo digest, when the runner read it
    controller_host: str = ""  # the machine cvs-tui ran on
    cpu_model: str | None = None  # the controller's CPU (a remote node's is in gpu_* / node health)
    gpu_driver: str | None = None
    rocm_version: str | None = None
    python: str = ""


class Results(_Model):
    schema_version: int = SCHEMA_VERSION
    tool: str = "cvs-tui"
    tool_version: str
    created_at: float
    source: Literal["live", "analyze"]
    config_path: str
    config_name: str
    mode: str
    model_label: str = ""
    gpu_name: str = ""
    gpus_per_node: int | None = None
    enforce_thresholds: bool = False
    threshold_path: str | None = None
    hosts: list[str] = Field(default_factory=list)
    stages: list[StageRecord] = Field(default_factory=list)
    runs: list[RunRecord] = Field(default_factory=list)
    metric_definitions: dict[str, str] = Field(default_factory=dict)
    window_definition: str = ""
    node_health: list[NodeHealthRecord] = Field(default_factory=list)  # empty: health not watched
    provenance: Provenance = Field(default_factory=Provenance)  # additive: older files load without it
    # the plan's warnings (host-key checks off, thresholds not enforced, ...): shown at the top of the report
    warnings: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Re-derived from the records, never from one status field: at least one run, every run complete
        with status PASS, no FAIL verdict, every gated verdict PASS, every stage passed or skipped."""
        if not self.runs:
            return False  # nothing judged never passes
        if any(s.state not in ("passed", "skipped") for s in self.stages):
            return False  # failed, or left running/pending: the suite did not finish
        return all(run_passed(r) for r in self.runs)

    @property
    def failures(self) -> list[str]:
        # a stage that only wraps one run (run:<key>, analyze:<key>) is reported through that run
        wrapped = {f"{p}:{r.key}" for r in self.runs for p in ("run", "analyze")}
        out = [
            f"stage {s.name}: {s.detail or 'failed'}"
            for s in self.stages
            if s.state == "failed" and s.name not in wrapped
        ]
        out += [f"stage {s.name}: left {s.state}" for s in self.stages if s.state in ("running", "pending")]
        for r in self.runs:
            if r.outcome != "complete":
                out.append(f"run {r.key}: {r.outcome}: {r.reason}")
            out += [f"run {r.key}: {v.message}" for v in r.verdicts if v.status == "FAIL"]
            out += [
                f"run {r.key}: {v.metric} is gated but {v.status}: {v.message or v.actual_text}"
                for v in r.verdicts
                if v.gated and v.status not in ("PASS", "FAIL")
            ]
            if (
                r.outcome == "complete"
                and r.status != "PASS"
                and not any(v.status == "FAIL" for v in r.verdicts)
            ):
                out.append(f"run {r.key}: status {r.status}")
        if not self.runs:
            out.append("no run was judged")
        return out


class Tally(NamedTuple):
    """The counts every front-end tells (the exit line, report.html, summary.md, the TUI): runs and
    stages that failed count as failed, next to the metric checks."""

    runs: int
    runs_failed: int
    stages_failed: int  # failed or left running/pending; a stage that only wraps one run is the run's
    checks_passed: int  # PASS verdicts
    checks_failed: int  # FAIL verdicts
    recorded: int
    not_available: int
    reason: str  # the first failure, "" when the suite passed


def tally(results: Results) -> Tally:
    wrapped = {f"{p}:{r.key}" for r in results.runs for p in ("run", "analyze")}
    counts = {s: 0 for s in ("PASS", "FAIL", "RECORD", "N/A")}
    for r in results.runs:
        for v in r.verdicts:
            counts[v.status] = counts.get(v.status, 0) + 1
    failures = results.failures
    return Tally(
        runs=len(results.runs),
        runs_failed=sum(not run_passed(r) for r in results.runs),
        stages_failed=sum(
            s.state != "passed" and s.state != "skipped" and s.name not in wrapped for s in results.stages
        ),
        checks_passed=counts["PASS"],
        checks_failed=counts["FAIL"],
        recorded=counts["RECORD"],
        not_available=counts["N/A"],
        reason="" if results.passed else (failures[0] if failures else "not every stage finished"),
    )


def run_passed(r: RunRecord) -> bool:
    """One run passes when it completed, says PASS, has no FAIL verdict, every gated verdict is PASS and
    no node exited with an error (a crafted or damaged file saying PASS beside one is not a pass: L10)."""
    return (
        r.outcome == "complete"
        and r.status == "PASS"
        and all(n.exit_code in (0, None) for n in r.nodes)
        and not any(v.status == "FAIL" for v in r.verdicts)
        and all(v.status == "PASS" for v in r.verdicts if v.gated)
    )


def write_results(results: Results, path: str | os.PathLike[str]) -> Path:
    """Write ``results`` as JSON atomically (temp file in the same folder + os.replace)."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # known secret values a node printed are masked here too (audit #11)
    write_atomic(dest, mask_secrets(results.model_dump_json(indent=2)) + "\n", mode=FILE_MODE)
    return dest


def load_results(path: str | os.PathLike[str]) -> Results:
    """Read a results.json; any problem is a UserError naming the file and the fix."""
    p = Path(path)
    try:
        data = loads_strict(read_text_capped(p, RESULTS_MAX), finite=False)
    except FileNotFoundError:
        raise UserError(
            f"{p}: no such results file; pass the results.json a run or `analyze` wrote"
        ) from None
    except InputFileError as exc:
        raise UserError(f"{exc}; pass the results.json a run or `analyze` wrote") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: cannot read ({exc.__class__.__name__}: {exc})") from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{p}: not JSON (line {exc.lineno}: {exc.msg}); pass a cvs-tui results.json"
        ) from None
    except JsonInputError as exc:
        raise UserError(f"{p}: not a cvs-tui results file ({exc})") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise UserError(f"{p}: not a cvs-tui results file (no schema_version)")
    # `true == 1`: a boolean is no version (L9)
    if isinstance(data["schema_version"], bool) or data["schema_version"] not in READABLE_SCHEMA_VERSIONS:
        raise UserError(
            f"{p}: schema_version {data['schema_version']!r} is not supported (this cvs-tui reads "
            f"{SCHEMA_VERSION}); re-run `cvs-tui analyze` on the logs"
        )
    try:
        return Results.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise UserError(f"{p}: invalid results file at {where}: {first['msg']}") from None


# The name other modules use for one judged run.
RunResult = RunRecord
