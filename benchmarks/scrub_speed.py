"""`cvs-tui scrub` and `check-private` speed on a MaxText log, plain and after a big node list is learned
(audit 3 M9: RB04-RB08).

    python benchmarks/scrub_speed.py [--mb 10] [--baseline TREE]

The log is the fixture's step lines renumbered upwards to ``--mb`` MB, with a few private lines (an
address, a host, a token). The ``nodelist`` variant adds `nodes gpu[0001-4096] allocated` on its first
line and `gpu0077` further down: every one of the 4096 learned names must be looked for everywhere.
Each command runs in a fresh process (PYTHONPATH = the tree); printed: seconds and MB/s, with
``--baseline TREE`` side by side. A shared machine inflates every figure: compare within one run.

Figures, before -> after the secret rules as data, the anchored key=value rule and one pattern per shape
of learned names (1 MB log, 2 cores at load ~19, so the absolute rates are some 30x below an idle
machine's): scrub 145 -> 104 s; check-private 24.5 -> 31.6 s (more detectors); with `gpu[0001-4096]`
learned, scrub 148 -> 33 s and check-private 32 -> 14 s (the names no longer cost a search each). The
audit's goal of 20 MB/s is not reached: every detector still scans the whole text, several times per
scrub (learn, replace, re-check, suspects).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = (
    "I1130 07:28:34.235634 139736357583744 metric_logger.py:265] completed step: {n}, seconds: 0.056, "
    "TFLOP/s/device: 0.019, Tokens/s/device: 4597.206, total_weights: 256, loss: 7.501, lm_loss: 7.501, "
    "perplexity: 1810.470\n"
)
PRIVATE = (
    "I1130 07:28:35.000001 1 distributed.py:211] Connecting to gpu-node17.dc3.acme.net:1234 (10.42.7.19)\n"
    "I1130 07:28:35.000002 1 x.py:1] HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 user=alice\n"
)


def make_log(path: Path, mb: int, nodelist: bool) -> None:
    with path.open("w") as fh:
        if nodelist:
            fh.write("I1130 07:28:33.000000 1 x.py:1] nodes gpu[0001-4096] allocated\n")
        n = 0
        while fh.tell() < mb << 20:
            fh.write("".join(STEP.format(n=n + i) for i in range(5000)))
            fh.write(PRIVATE)
            if nodelist:
                fh.write("W1130 07:28:36.000000 1 x.py:1] gpu0077 slow\n")
            n += 5000


def timed(tree: Path, argv: list[str], cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.monotonic()
    # cwd is no checkout: `-m` puts the working folder before PYTHONPATH
    subprocess.run(
        [sys.executable, "-m", "cvs_tui", *argv], env=env, capture_output=True, check=False, cwd=cwd
    )
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=10)
    ap.add_argument("--baseline", type=Path)
    args = ap.parse_args()
    trees = ([("before", args.baseline)] if args.baseline else []) + [("after", ROOT)]
    print(f"load {os.getloadavg()[0]:.1f}; log {args.mb} MB")
    with tempfile.TemporaryDirectory(prefix="cvs-scrub-bench-") as t:
        for variant in ("plain", "nodelist"):
            log = Path(t) / f"{variant}.log"
            make_log(log, args.mb, variant == "nodelist")
            size = log.stat().st_size / (1 << 20)
            for what, argv in (
                ("scrub", ["scrub", str(log), "--out", str(Path(t) / "o")]),
                ("check-private", ["check-private", str(log)]),
            ):
                line = f"{variant:9} {what:14}"
                for label, tree in trees:
                    s = timed(tree, [*argv[:-1], f"{argv[-1]}-{label}"] if what == "scrub" else argv, Path(t))
                    line += f"  {label} {s:7.1f} s {size / s:6.2f} MB/s"
                print(line, flush=True)


if __name__ == "__main__":
    main()
