"""MaxText logs of the world corpus (tests/fixtures/world/maxtext/): each `NAME.log` with `NAME.json` holding
its source, what was trimmed, the plan the log states, and the engineer's labels.

One check per log (kind "maxtext log"): every step line parsed; the verdict; the root cause named in the
run's reason; the steady step time (median, the tool's p50) and TFLOP/s and tokens/s per device within
3 % of the label, or N/A with a reason where the label says no steady figure can be drawn; the devices
per node where the label gives them."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from cvs_tui.core.results import RunRecord
from world.check import WORLD, Check
from world.judging import analyze_log

TOLERANCE = 0.03
_STEP_LINE = re.compile(r"completed step: (\d+),")


def _close(got: float | None, want: float) -> bool:
    return got is not None and math.isfinite(got) and abs(got - want) <= TOLERANCE * abs(want)


def _metric(run: RunRecord, name: str) -> tuple[float | None, str]:
    m = run.metric(name)
    return (m.value, m.reason) if m is not None else (None, "")


def _fmt(v: float | None) -> str:
    return "N/A" if v is None else f"{v:.4g}"


def judge(doc: dict[str, Any], log: Path) -> tuple[list[str], list[str], list[str]]:
    """(expected, got, misses) for one labelled log."""
    labels, plan = doc["labels"], doc["plan"]
    text = log.read_text()
    logged = [int(s) for s in _STEP_LINE.findall(text)]
    steps = plan.get("steps") or (max(logged) + 1)
    run = analyze_log(
        log,
        steps=steps,
        batch=plan.get("per_device_batch_size"),
        seq=plan.get("max_target_length"),
        gpus_per_node=plan.get("gpus_per_node"),
    )
    exp: list[str] = []
    got: list[str] = []
    miss: list[str] = []

    def field(name: str, want: str, have: str, ok: bool) -> None:
        exp.append(f"{name}={want}")
        got.append(f"{name}={have}")
        if not ok:
            miss.append(name)

    n_steps = next((n.steps_logged for n in run.nodes), 0)
    field("steps", str(len(set(logged))), str(n_steps), n_steps == len(set(logged)))
    if labels.get("verdict") is not None:
        field("verdict", labels["verdict"], run.status, run.status == labels["verdict"])
    if labels.get("root_cause"):
        want = labels["root_cause"]
        field("root cause", want, run.reason[:200], want.lower() in run.reason.lower())
    p50, p50_why = _metric(run, "training.step_time_p50_ms")
    step_s = None if p50 is None else p50 / 1000.0
    for key, name, have, why in (
        ("steady_step_seconds", "step s", step_s, p50_why),
        ("tflops_per_device", "TFLOP/s/device", *_metric(run, "training.tflops_per_sec_per_gpu")),
        ("tokens_per_device", "tokens/s/device", *_metric(run, "training.tokens_per_sec_per_gpu")),
    ):
        if key not in labels:
            continue
        want = labels[key]
        if want is not None:
            field(name, _fmt(want), _fmt(have), _close(have, want))
        elif labels.get("steady_step_seconds") is None and "steady_reason" in labels:
            # no steady window: the figure is N/A and says why
            na = have is None and bool(why)
            field(name, "N/A (with a reason)", f"{_fmt(have)} ({why or 'no reason'})", na)
    if "devices_per_node" in labels:
        dev, want_dev = run.environment.devices_per_node, labels["devices_per_node"]
        field("devices/node", str(want_dev), str(dev), dev == want_dev)
    return exp, got, miss


def items() -> list[Path]:
    """The label files, one per log."""
    return sorted((WORLD / "maxtext").glob("*.json"))


def check(meta: Path) -> Check:
    doc = json.loads(meta.read_text())
    exp, got, miss = judge(doc, meta.with_name(doc["log"]))
    return Check(
        kind="maxtext log",
        item=f"maxtext/{doc['log']}" + (f" [{', '.join(miss)}]" if miss else ""),
        ok=not miss,
        expected="; ".join(exp),
        got="; ".join(got),
    )


def checks() -> list[Check]:
    return [check(meta) for meta in items()]
