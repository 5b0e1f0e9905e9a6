"""The TUI's first frame in a real terminal (tmux): wall time from launch to what the user sees.

    python benchmarks/tui_first_frame.py [--repeat 5] [--cvs-tui PATH]

Starts ``cvs-tui analyze CONFIG --logs LOG --run SMOKE`` (the finished 20-step fixture log, the same
case as issue 18's "~6 s in tmux") in a detached tmux session of 160x48, and polls the pane every
10 ms. Printed per run and as median/minimum: the first frame (the pane shows the app's header
line, ``cvs-tui analyze``), and the verdict on screen (``suite PASSED``). Next to them the same
terminal's time to show the output of a bare ``python -c print(1)``, the floor any command pays
(tmux start, interpreter start, the pane's own refresh). The machine's load average is printed too:
a loaded machine stretches every figure.

Also printed: the import time of ``cvs_tui.tui.app`` in a fresh interpreter (``-X importtime``,
cumulative) and its five most expensive direct imports, where most of the first frame goes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs/local/cpu_jaxmaxtext_tiny-llama_single.json"
LOG = ROOT / "tests/fixtures/maxtext/single_20steps.log"


def _pane(sock: str) -> str:
    r = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p", "-t", "s"], capture_output=True, text=True)
    return r.stdout


def one(cmd: str, first: str, done: str, timeout: float = 60.0) -> tuple[float, float]:
    """Seconds from launch until ``first`` and then ``done`` appear in the pane."""
    sock = f"ff{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    subprocess.run(
        ["tmux", "-L", sock, "new-session", "-d", "-x", "160", "-y", "48", "-s", "s", f"{cmd}; sleep 60"],
        check=True,
    )
    t_first = t_done = float("nan")
    try:
        while time.monotonic() - t0 < timeout:
            screen = _pane(sock)
            now = time.monotonic() - t0
            if t_first != t_first and first in screen:
                t_first = now
            if done in screen:
                t_done = now
                break
            time.sleep(0.01)
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
    return t_first, t_done


def import_profile(python: str) -> tuple[float, list[tuple[float, str]]]:
    r = subprocess.run(
        [python, "-X", "importtime", "-c", "import cvs_tui.tui.app"], capture_output=True, text=True, cwd=ROOT
    )
    total = 0.0
    direct: list[tuple[float, str]] = []
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = line.split("|")
        if name.strip() == "cvs_tui.tui.app":
            total = int(cum) / 1e6
        elif name.startswith("   ") and not name.startswith("    "):  # a direct import of the app module
            direct.append((int(cum) / 1e6, name.strip()))
    return total, sorted(direct, reverse=True)[:5]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cvs-tui", default=str(ROOT / ".venv/bin/cvs-tui"))
    a = ap.parse_args()
    if shutil.which("tmux") is None:
        print("needs tmux", file=sys.stderr)
        return 2
    python = str(Path(a.cvs_tui).with_name("python"))
    env_mx = os.environ.get("CVS_TUI_MAXTEXT_PYTHON") or str(ROOT / ".venv-maxtext/bin/python")
    firsts: list[float] = []
    verdicts: list[float] = []
    floors: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeat + 1):  # the first run warms the page cache and is not counted
            out = Path(tmp) / f"o{i}"
            cmd = f"CVS_TUI_MAXTEXT_PYTHON={env_mx} {a.cvs_tui} analyze {CONFIG} --logs {LOG} --run SMOKE"
            cmd += f" --out {out}"
            f, v = one(cmd, "cvs-tui analyze", "suite PASSED")
            floor, _ = one(f"{python} -c 'print(\"floor-mark\")'", "floor-mark", "floor-mark")
            if i:
                firsts.append(f)
                verdicts.append(v)
                floors.append(floor)
                print(f"run {i}: first frame {f:.2f} s, verdict {v:.2f} s (bare python: {floor:.2f} s)")
    print(
        f"first frame: median {statistics.median(firsts):.2f} s, min {min(firsts):.2f} s; "
        f"verdict on screen: median {statistics.median(verdicts):.2f} s, min {min(verdicts):.2f} s; "
        f"bare python: median {statistics.median(floors):.2f} s"
    )
    total, direct = import_profile(python)
    largest = ", ".join(f"{n} {s:.2f} s" for s, n in direct)
    print(f"import cvs_tui.tui.app: {total:.2f} s; largest direct imports: {largest}")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
