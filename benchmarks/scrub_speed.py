"""`cvs-tui scrub` and `check-private` speed and memory on a MaxText log, plain and after a big node list
is learned (audit 3 M9: RB04-RB08).

    python benchmarks/scrub_speed.py [--mb 20] [--baseline TREE --baseline-mb 1]

The log is the MaxText fixture `single_20steps.log` (start-up output, config dump, 20 step lines)
repeated to ``--mb`` MB with its step numbers counting on, plus a few private lines (an address, a host,
a token, a user) once per MB. The ``nodelist`` variant adds `nodes gpu[0001-4096] allocated` on its
first line and `gpu0077` in every copy: all 4096 learned names must be looked for everywhere. Each command
runs in a fresh process (PYTHONPATH = the tree); printed per tree: wall seconds, CPU seconds (user+sys),
MB/s by wall and by CPU, and peak RSS. The baseline tree is run on a smaller log (``--baseline-mb``) when
it is slow; rates compare across sizes, seconds do not. A shared machine inflates wall time: the CPU
rate is the steadier figure.

Figures (2 cores shared with other sessions, load 1.7; before = main before the line screen, on a 1 MB
log since it is slow; after = this tree on a 200 MB log; MB/s by wall time, by CPU time in brackets):

    variant   command        before MB/s        peak RSS    after MB/s        peak RSS
    plain     scrub          0.10 (0.14)        22 MB       21.2 (23.5)       119 MB
    plain     check-private  0.29 (0.32)        21 MB       32.7 (37.7)        99 MB
    nodelist  scrub          0.15 (0.17)        25 MB       20.3 (22.9)       121 MB
    nodelist  check-private  0.33 (0.36)        22 MB       25.4 (27.6)       101 MB

At load 5 the wall rates halve (CPU rates 19-27 MB/s). Before, memory grew with the file (816 MB for a
200 MB scrub in the audit, RB04); now it is bounded by the chunk size.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "maxtext" / "single_20steps.log"
PRIVATE = (
    "I1130 07:28:35.000001 1 distributed.py:211] Connecting to gpu-node17.dc3.acme.net:1234 (10.42.7.19)\n"
    "I1130 07:28:35.000002 1 x.py:1] HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 user=alice\n"
)
_STEP = re.compile(r"completed step: (\d+)")


def make_log(path: Path, mb: int, nodelist: bool) -> None:
    base = FIXTURE.read_text(encoding="utf-8")
    with path.open("w", encoding="utf-8") as fh:
        if nodelist:
            fh.write("I1130 07:28:33.000000 1 x.py:1] nodes gpu[0001-4096] allocated\n")
        copy = 0
        next_private = 0
        while fh.tell() < mb << 20:
            fh.write(_STEP.sub(lambda m, k=copy: f"completed step: {int(m.group(1)) + 20 * k}", base))
            if fh.tell() >= next_private:
                fh.write(PRIVATE)
                next_private += 1 << 20
            if nodelist:
                fh.write("W1130 07:28:36.000000 1 x.py:1] gpu0077 slow\n")
            copy += 1


def measure(tree: Path, argv: list[str], cwd: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one command in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.monotonic()
    # cwd is no checkout: `-m` puts the working folder before PYTHONPATH
    proc = subprocess.Popen(
        [sys.executable, "-m", "cvs_tui", *argv],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, _, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=20, help="log size for this tree")
    ap.add_argument("--baseline", type=Path, help="another checkout to compare with (e.g. main)")
    ap.add_argument("--baseline-mb", type=int, default=1, help="log size for the baseline tree")
    args = ap.parse_args()
    runs = ([("before", args.baseline, args.baseline_mb)] if args.baseline else []) + [
        ("after", ROOT, args.mb)
    ]
    print(f"load {os.getloadavg()[0]:.1f}")
    print(
        f"{'variant':9} {'command':14} {'tree':7} {'MB':>6} {'wall s':>7} {'cpu s':>7} "
        f"{'MB/s':>7} {'(cpu)':>7} {'peak RSS':>9}"
    )
    with tempfile.TemporaryDirectory(prefix="cvs-scrub-bench-") as t:
        for variant in ("plain", "nodelist"):
            for label, tree, mb in runs:
                log = Path(t) / f"{variant}-{mb}.log"
                if not log.exists():
                    make_log(log, mb, variant == "nodelist")
                size = log.stat().st_size / (1 << 20)
                for what, argv in (
                    ("scrub", ["scrub", str(log), "--out", str(Path(t) / f"o-{label}-{variant}")]),
                    ("check-private", ["check-private", str(log)]),
                ):
                    wall, cpu, rss = measure(tree, argv, Path(t))
                    print(
                        f"{variant:9} {what:14} {label:7} {size:6.1f} {wall:7.2f} {cpu:7.2f} "
                        f"{size / wall:7.2f} {size / cpu:7.2f} {rss:7.0f} MB",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
