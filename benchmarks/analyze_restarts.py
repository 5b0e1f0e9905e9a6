"""`cvs-tui analyze` of a log that restarts at step 0 over and over (audit 3 L18, RB01): peak memory
must not grow with the number of restarts.

    python benchmarks/analyze_restarts.py [--mb 150] [--baseline TREE]

The log is the MaxText fixture `single_20steps.log` repeated verbatim to ``--mb`` MB: every copy is a
process that started, logged its start-up facts (versions, devices, memory estimate, parameters,
checkpointing off) and ran steps 0-19, so the log holds one restart per 8 KB (134 k in the audit's 1 GB).
`analyze` runs in a fresh process per tree (PYTHONPATH = the tree) on one node; printed: wall and CPU
seconds, and the peak RSS of the analyze process, of its largest worker and of all together (sampled,
see `analyze_big.py`). A shared machine inflates the seconds; the memory figures are the point.

Figures (2 cores, load 4-5; before = main, after = this tree; peak RSS of the analyze process):
    100 MB, 12.5 k restarts: 165 MB -> 111 MB, CPU 5.9 -> 3.0 s
    300 MB, 37.6 k restarts: 280 MB -> 112 MB, CPU 19.0 -> 7.3 s (no longer grows with the restarts)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_big import DEFAULT_CONFIG, DEFAULT_FIXTURE, run_sampled

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=150.0)
    ap.add_argument("--baseline", type=Path, help="another checkout to compare with (e.g. main)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="analyze-restarts-"))
    logs = work / "logs"
    logs.mkdir()
    text = DEFAULT_FIXTURE.read_text(encoding="utf-8")
    copies = 0
    with (logs / "node0.log").open("w", encoding="utf-8") as fh:
        while fh.tell() < args.mb * 1e6:
            fh.write(text)
            copies += 1
    size = (logs / "node0.log").stat().st_size / 1e6
    print(f"log {size:.0f} MB, {copies} restarts at step 0; load {os.getloadavg()[0]:.1f}")
    env = dict(os.environ)
    env.setdefault("CVS_TUI_MAXTEXT_PYTHON", sys.executable)  # named by the local config; nothing runs
    trees = ([("before", args.baseline)] if args.baseline else []) + [("after", ROOT)]
    for label, tree in trees:
        out = work / f"out-{label}"
        cmd = [sys.executable, "-m", "cvs_tui", "analyze", str(DEFAULT_CONFIG), "--logs", str(logs)]
        cmd += ["--run", "SMOKE", "--out", str(out), "--no-ui"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc, mem = run_sampled(cmd, {**env, "PYTHONPATH": str(tree)})
        wall = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (usage.ru_utime - before.ru_utime) + (usage.ru_stime - before.ru_stime)
        print(
            f"{label:7} exit {proc.returncode}  wall {wall:6.1f} s  CPU {cpu:6.1f} s  peak RSS: analyze "
            f"{mem['parent'] / 1024:5.0f} MB, largest worker {mem['worker'] / 1024:5.0f} MB, "
            f"all {mem['total'] / 1024:5.0f} MB",
            flush=True,
        )
        if proc.returncode not in (0, 1):
            print(proc.stderr.strip()[-1500:])
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
