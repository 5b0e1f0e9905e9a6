"""Steady state under asynchronous dispatch: false alarms and detection of `compare`, new rule against old.

    python benchmarks/steady_state.py [--pairs 100] [--steps 80] [--moves 0.02] [--resamples 400] [--seed 1]

A synthetic set of TPU v6e MaxText node logs (the header of tests/fixtures/async_dispatch), each judged
by the real ``analyze`` path and compared with ``compare --within-run`` (threshold 2 %):

* a run: ``--steps`` steps of 0.15 s x speed with lognormal jitter (CV 3 %), a warm-up (11 s, 1-3 s,
  then a step that gives or takes part of its neighbour's time), 0-3 stalls of 5-30 s at random steps,
  each handing a neighbour part of its time or taking part of the next step's (the step after a stall is
  then impossibly fast), and time moved between neighbours at ``--moves`` of the other steps (20-95 %
  of a step);
* ``--pairs`` equal-speed pairs (two runs of speed 1, different seeds): each must compare as NO CHANGE;
* ``--pairs`` slowdown pairs (speed 1 against 1/1.05 of it: 5 % fewer tokens/s): compare must find
  the regression.

Each pair is judged twice: with the steady-state rule (``judge.steady``), and with the old estimator (the
mean over the window minus stalls: the rule's drops turned off). Printed side by side: the share of
equal pairs that compare as NO CHANGE (the run's verdict and the tokens/s row), the share of slowdown
pairs found (REGRESSED), and the spread of the tokens/s per device difference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np

from cvs_tui.core import compare as cmp
from cvs_tui.core.compare import samples as compare_samples
from cvs_tui.core.compare.inputs import RunInput
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.config.thresholds import GATED_METRICS
from cvs_tui.core.judge import steady
from cvs_tui.core.sources.inputs import plan_for
from cvs_tui.core.sources.offline import analyze_paths

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs/local/cpu_jaxmaxtext_tiny-llama_single.json"
KEY = "BS=2,PRECISION=BF16,SL=128"
TFLOPS_PER_STEP = 13.6
TOKENS = 16384
STEP = 0.15


def seconds(rng: random.Random, n: int, speed: float, moves: float) -> list[float]:
    """One run's per-step seconds (see the module docstring)."""
    base = STEP / speed
    sigma = math.sqrt(math.log(1.0 + 0.03**2))
    sec = [base * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]
    sec[0], sec[1] = 11.0 + rng.random(), rng.uniform(1.0, 3.0)
    f = rng.uniform(0.2, 0.9)  # the warm-up's last step and the first steady one share their time
    if rng.random() < 0.5:
        sec[2], sec[3] = sec[2] + f * sec[3], (1 - f) * sec[3]
    else:
        sec[2], sec[3] = (1 - f) * sec[2], sec[3] + f * sec[2]
    for i in range(4, n - 1):  # time moved between neighbours
        if rng.random() < moves:
            j = i + rng.choice((-1, 1))
            moved = rng.uniform(0.2, 0.95) * sec[i]
            sec[i] -= moved
            sec[j] += moved
    for s in rng.sample(range(5, n - 2), rng.randint(0, 3)):  # stalls and their neighbours
        sec[s] += rng.uniform(5.0, 30.0)
        if rng.random() < 0.5:
            moved = rng.uniform(0.3, 1.0) * sec[s + 1]  # the next step's time lands in the stall
            sec[s + 1] -= moved
            sec[s] += moved
        else:
            moved = rng.uniform(0.3, 1.0) * base  # the stall's start lands in the step before
            sec[s - 1] += moved
            sec[s] -= moved
    return [max(round(x, 3), 0.001) for x in sec]


def log_text(sec: list[float]) -> str:
    head = "I0603 14:02:11.104233 140118562404160 "
    out = [
        head + "max_utils.py:835] System Information: Jax Version: 0.7.0",
        head + "max_utils.py:836] System Information: Jaxlib Version: 0.7.0",
        head + "max_utils.py:837] System Information: Jax Backend: PJRT C API",
        "TFRT TPU v6 lite",
        head + "maxtext_utils.py:2098] Num_devices: 32, shape (1, 32, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)",
        "Per train step:",
        f" Total TFLOPs: {TFLOPS_PER_STEP:.2f} ",
        " split as 93.41% learnable weight flops and 6.59% attention flops",
    ]
    for i, s in enumerate(sec):
        out.append(
            head + f"metric_logger.py:265] completed step: {i}, seconds: {s:.3f}, TFLOP/s/device: "
            f"{TFLOPS_PER_STEP / s:.3f}, Tokens/s/device: {TOKENS / s:.3f}, total_weights: {TOKENS * 32}, "
            f"loss: {10.0 - 0.01 * i:.3f}"
        )
    return "\n".join(out) + "\n"


def write_config(folder: Path, steps: int) -> Path:
    """The shipped local config for ``steps`` steps of the run KEY in bf16 (the TPU logs' precision: the
    v6e's peak is known there), recording every metric."""
    doc = json.loads(CONFIG.read_text())
    doc["train_params"]["python"] = "python3"
    for over in doc["sweeps"].values():
        over["steps"] = steps
    doc["train_params"]["maxtext_config"]["steps"] = steps
    doc["train_params"]["maxtext_config"]["dtype"] = "bfloat16"
    doc["runs"] = [KEY]
    info = {"kind": "info", "value": 0}
    (folder / doc["threshold_json"]).write_text(json.dumps({KEY: dict.fromkeys(GATED_METRICS, info)}))
    path = folder / CONFIG.name
    path.write_text(json.dumps(doc))
    return path


@contextlib.contextmanager
def old_estimator() -> Iterator[None]:
    """The judge and compare without the steady-state rule's drops: the window minus stalls."""

    def none(sec: object, *a: object, **k: object) -> steady.SteadyDrops:
        n = len(sec)  # type: ignore[arg-type]
        return steady.SteadyDrops(np.zeros(n, np.bool_), np.zeros(n, np.bool_))

    with (
        mock.patch.object(steady, "steady_drops", none),
        mock.patch.object(compare_samples, "steady_drops", none),
    ):
        yield


def judge(plan: object, logs: list[Path]) -> list[RunInput]:
    return [RunInput(str(p), analyze_paths(plan, [p], None)) for p in logs]  # type: ignore[arg-type]


def compare(a: RunInput, b: RunInput, resamples: int) -> tuple[str, str, float, str]:
    """(run verdict, tokens/s per device verdict, its Δ %, the rows that decided a verdict other than NO
    CHANGE)."""
    rc = cmp.compare([a], [b], within_run=True, resamples=resamples).runs[0]
    tok = next(m for m in rc.metrics if m.metric == "tokens_per_sec_per_device")
    why = ", ".join(
        f"{m.metric} {m.verdict} {m.delta_pct:+.1f} %"
        for m in rc.metrics
        if m.verdict not in (cmp.NO_CHANGE, cmp.NOT_COMPARABLE) and m.metric != "stall_seconds"
    )
    return rc.verdict, tok.verdict, tok.delta_pct if tok.delta_pct is not None else math.nan, why


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--resamples", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--moves", type=float, default=0.02, help="share of steady steps that move time to a neighbour"
    )
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cvs-steady-") as tmp:
        root = Path(tmp)
        plan = plan_for(load_config(write_config(root, args.steps)), [root])
        logs: dict[str, list[Path]] = {"equal": [], "slow": []}
        for i in range(3 * args.pairs):
            kind = "slow" if i >= 2 * args.pairs else "equal"
            p = root / f"{kind}{i}.log"
            speed = 1.0 / 1.05 if kind == "slow" else 1.0
            p.write_text(log_text(seconds(rng, args.steps, speed, args.moves)))
            logs[kind].append(p)
        rows: dict[str, dict[str, list[tuple[str, str, float]]]] = {}
        for name, ctx in (("old", contextlib.nullcontext()), ("new", contextlib.nullcontext())):
            with old_estimator() if name == "old" else ctx:
                eq = judge(plan, logs["equal"])
                sl = judge(plan, logs["slow"])
                rows[name] = {
                    "equal": [compare(eq[2 * k], eq[2 * k + 1], args.resamples) for k in range(args.pairs)],
                    "slow": [compare(eq[k], sl[k], args.resamples) for k in range(args.pairs)],
                }
    n = args.pairs
    print(f"steady state under asynchronous dispatch: {n} equal-speed and {n} 5 %-slowdown pairs, ")
    print(
        f"{args.steps} steps a run, time moved at {args.moves:.0%} of steady steps, compare --within-run, "
        f"threshold 2 %, {args.resamples} resamples"
    )
    print(f"{'':46}{'old (window minus stalls)':>28}{'new (judge.steady)':>22}")

    def line(label: str, fn: object) -> None:
        cells = [fn(rows[k]) for k in ("old", "new")]  # type: ignore[operator]
        print(f"{label:46}{cells[0]:>28}{cells[1]:>22}")

    def share(kind: str, col: int, want: str) -> object:
        return lambda r: f"{sum(x[col] == want for x in r[kind]) / n * 100:.1f} %"

    def spread(kind: str) -> object:
        return lambda r: (
            f"{statistics.median(x[2] for x in r[kind]):+.2f} % / "
            f"{max(abs(x[2]) for x in r[kind] if math.isfinite(x[2])):.1f} %"
        )

    line("equal pairs: run verdict NO CHANGE", share("equal", 0, cmp.NO_CHANGE))
    line("equal pairs: tokens/s row NO CHANGE", share("equal", 1, cmp.NO_CHANGE))
    line("equal pairs: tokens/s Δ median / max |Δ|", spread("equal"))
    line("5 % slowdown: run verdict REGRESSED (found)", share("slow", 0, cmp.REGRESSED))
    line("5 % slowdown: tokens/s row REGRESSED (found)", share("slow", 1, cmp.REGRESSED))
    line("5 % slowdown: tokens/s Δ median / max |Δ|", spread("slow"))
    for name in ("old", "new"):
        alarms = [x[3] for x in rows[name]["equal"] if x[0] != cmp.NO_CHANGE]
        print(f"{name}: false alarms on equal pairs: {'; '.join(alarms) or 'none'}")
    print(f"wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
