"""What cvs-tui costs on top of the training it watches: the same MaxText run, launched by cvs-tui and
started directly, side by side.

    CVS_TUI_MAXTEXT_PYTHON=.venv-maxtext/bin/python python benchmarks/overhead.py [--repeat 3] [--steps 30]

One sweep of the embedded CPU config (smoke and checkpoint resume off) runs alternately (A/B/A/B, so
machine noise hits both sides alike):

* direct: ``python -m maxtext.trainers.pre_train.train <yaml>`` with the YAML and environment that
  `cvs-tui plan` produces for that run, output to a file;
* cvs-tui: ``cvs-tui CONFIG --no-ui``; its run stage (launch, follow, parse, judge) is timed from
  results.json, and the whole command (preflight, report, teardown included) from outside.

Prints the medians and the ratio cvs-tui / direct for the run stage (target <= 1.10) and for the whole
command. Set-up (virtual environments) is excluded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "local" / "cpu_jaxmaxtext_tiny-llama_single.json"
CLI = Path(sys.executable).with_name("cvs-tui")


def variant(tmp: Path, steps: int) -> tuple[Path, str]:
    cfg = json.loads(CONFIG.read_text())
    key = cfg["runs"][0]
    cfg["runs"] = [key]
    cfg["smoke"]["enabled"] = False
    cfg["checkpoint_resume"]["enabled"] = False
    cfg["sweeps"][key]["steps"] = steps
    cfg["threshold_json"] = str(CONFIG.parent / cfg["threshold_json"])
    path = tmp / CONFIG.name
    path.write_text(json.dumps(cfg))
    return path, key


def direct(config: Path, key: str, tmp: Path, i: int) -> float:
    out = tmp / f"direct{i}"
    plan = json.loads(
        subprocess.run(
            [str(CLI), "plan", str(config), "--json", "--out", str(out)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    run = next(r for r in plan["runs"] if r["key"] == key)
    out.mkdir(parents=True, exist_ok=True)
    yml = out / "maxtext.yml"
    yml.write_text(run["yaml_text"])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **run["env"], **run["node_env"][0]}
    py = os.environ["CVS_TUI_MAXTEXT_PYTHON"]
    t0 = time.perf_counter()
    with (out / "node0.log").open("wb") as log:
        rc = subprocess.run(
            [py, "-m", "maxtext.trainers.pre_train.train", str(yml)], stdout=log, stderr=log, env=env
        ).returncode
    wall = time.perf_counter() - t0
    if rc != 0:
        sys.exit(f"direct run failed (exit {rc}); see {out / 'node0.log'}")
    return wall


def via_cvs_tui(config: Path, key: str, tmp: Path, i: int) -> tuple[float, float]:
    out = tmp / f"cvs{i}"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(CLI), str(config), "--no-ui", "--out", str(out)], capture_output=True, text=True
    )
    total = time.perf_counter() - t0
    res = json.loads((out / "results.json").read_text())
    if proc.returncode not in (0, 1) or not res["runs"]:
        sys.exit(f"cvs-tui run failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    stage = next(s for s in res["stages"] if s["name"] == f"run:{key}")
    return stage["ended_at"] - stage["started_at"], total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    if not os.environ.get("CVS_TUI_MAXTEXT_PYTHON"):
        sys.exit("set CVS_TUI_MAXTEXT_PYTHON (scripts/setup-maxtext.sh prints it)")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        config, key = variant(tmp, args.steps)
        d_walls, stages, totals = [], [], []
        for i in range(args.repeat):
            d_walls.append(direct(config, key, tmp, i))
            s, t = via_cvs_tui(config, key, tmp, i)
            stages.append(s)
            totals.append(t)
            print(
                f"  round {i + 1}: direct {d_walls[-1]:6.2f} s   "
                f"cvs-tui run stage {s:6.2f} s   whole {t:6.2f} s"
            )
    dm, sm, tm = (statistics.median(x) for x in (d_walls, stages, totals))
    print(f"\n{args.steps} steps, tiny model, {args.repeat} rounds (medians)")
    print(f"{'':28}{'wall s':>8}{'ratio':>8}")
    print(f"{'MaxText started directly':28}{dm:8.2f}{1.0:8.2f}")
    print(f"{'cvs-tui run stage':28}{sm:8.2f}{sm / dm:8.2f}   (target <= 1.10)")
    print(f"{'cvs-tui whole command':28}{tm:8.2f}{tm / dm:8.2f}   (adds preflight, reports, teardown)")


if __name__ == "__main__":
    main()
