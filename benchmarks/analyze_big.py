"""`cvs-tui analyze` of big runs: N node logs of S MB each, wall time, MB/s and peak memory.

    python benchmarks/analyze_big.py [--nodes 8] [--mb 100] [--fixture LOG] [--config CONFIG]
        [--run KEY] [--dir DIR] [--keep] [--cvs-tui PATH]

The node logs are built from a real MaxText log (default: tests/fixtures/maxtext/single_20steps.log):
its start-up lines, then its step lines repeated with renumbered steps (step k of repeat r becomes
r * steps + k, timestamps kept) until the file holds S MB, then its closing lines. Node i's copy is
the same text, so every node agrees and the judge has real work to do on each.

The command runs once in a fresh process (`cvs-tui analyze CONFIG --logs DIR --run KEY --no-ui`),
after the logs are written and read once (warm page cache). Printed: wall time, input MB/s, the peak
RSS of the analyze process and of the largest process it waited for (a parse worker), from
getrusage, and the machine's load average (a shared machine inflates every figure).

Memory is sampled from /proc every 50 ms while the command runs: the peak RSS (VmHWM) of the analyze
process itself and of its largest parse worker, and the largest sum of their RSS. The parser alone is
timed on node 0's log first (CPU time, one process), and the wall time analyze would take at that
speed on every core is printed next to the measured one. Compare two code trees by running the same
command with PYTHONPATH set to each (``--cvs-tui`` is the entry point of the environment to use).

Figures, before -> after the line clock and the step columns moved into the byte scanner and the loss
curve's points were bounded (least of interleaved runs, load 1.7-3.1, 2 cores): 2 x 100 MB wall 6.3 ->
5.1 s, CPU 9.1 -> 6.6 s, analyze process 176 -> 151 MB, largest worker 161 -> 152 MB, output 14.7 ->
9.1 MB; 2 x 400 MB wall 16.5 -> 11.4 s, CPU 26.4 -> 16.6 s, analyze process 462 -> 430 MB, largest
worker 476 -> 454 MB, output 56.7 -> 34.1 MB; 64 x 100 MB CPU 219 -> 124 s, wall 125 -> 131 s (both
read the 6.5 GB at ~50 MB/s: it does not stay in this machine's page cache), analyze process 422 -> 386
MB, largest worker 190 -> 181 MB. The "largest process by getrusage" line counts the
parser-alone run too (it holds every event), so it is the same before and after.

Then, with each worker's columns and clock in files judged a chunk at a time and the run window merged a
block at a time (load 0.6-0.9): 2 x 100 MB analyze process 151 -> 101 MB, largest worker 158 -> 66 MB,
wall 5.0 -> 4.4 s; 2 x 400 MB analyze process 431 -> 101 MB, largest worker 455 -> 64 MB, wall 15.0 ->
8.2 s, CPU 22.3 -> 13.6 s, output 34.1 -> 1.2 MB; 64 x 100 MB wall 131 -> 75 s, analyze process 386 ->
308 MB (its nodes' bounded series), largest worker 181 -> 67 MB. Memory no longer grows with the logs'
length.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FIXTURE = ROOT / "tests/fixtures/maxtext/single_20steps.log"
DEFAULT_CONFIG = ROOT / "configs/local/cpu_jaxmaxtext_tiny-llama_single.json"
STEP = re.compile(rb"completed step: (\d+),")


def split_fixture(text: bytes) -> tuple[bytes, list[bytes], bytes, int]:
    """(start-up lines, step block lines, closing lines, steps in the block)."""
    lines = text.splitlines(keepends=True)
    idx = [i for i, line in enumerate(lines) if STEP.search(line)]
    if not idx:
        raise SystemExit("analyze_big: the fixture has no `completed step:` line")
    first, last = idx[0], idx[-1]
    steps = max(int(STEP.search(lines[i])[1]) for i in idx) + 1  # type: ignore[index]
    return b"".join(lines[:first]), lines[first : last + 1], b"".join(lines[last + 1 :]), steps


def write_node_log(path: Path, fixture: Path, size: int) -> int:
    """Write one node log of about ``size`` bytes; returns its step count."""
    head, block, tail, steps = split_fixture(fixture.read_bytes())
    block_bytes = sum(len(b) for b in block)
    repeats = max(1, (size - len(head) - len(tail)) // block_bytes)
    with path.open("wb", buffering=1 << 20) as fh:
        fh.write(head)
        for r in range(repeats):
            off = r * steps
            chunk = [
                STEP.sub(lambda m, o=off: b"completed step: %d," % (int(m[1]) + o), line)  # type: ignore[misc]
                for line in block
            ]
            fh.write(b"".join(chunk))
        fh.write(tail)
    return repeats * steps


def parser_throughput(log: Path, env: dict[str, str]) -> float:
    """MB/s of CPU time of the parser alone on one node log, in a fresh process (what analyze's workers
    run before judging)."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from cvs_tui.core.sources.offline import parse_log_file\n"
        "t = time.process_time(); parse_log_file(Path(sys.argv[1]), None)\n"
        "print(Path(sys.argv[1]).stat().st_size / 1e6 / (time.process_time() - t))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(log)], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def _kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            kids += [int(x) for x in (task / "children").read_text().split()]
    except (OSError, ValueError):
        pass
    return kids


def run_sampled(
    cmd: list[str], env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
    """Run ``cmd``, reading every 50 ms the peak RSS (VmHWM, KiB) of it and of each of its children (the
    parse workers), and the largest sum of their current RSS."""
    mem = {"parent": 0, "worker": 0, "total": 0}
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        while p.poll() is None:
            mem["parent"] = max(mem["parent"], _kib(p.pid, "VmHWM"))
            kids = _children(p.pid)
            for k in kids:
                mem["worker"] = max(mem["worker"], _kib(k, "VmHWM"))
            mem["total"] = max(mem["total"], _kib(p.pid, "VmRSS") + sum(_kib(k, "VmRSS") for k in kids))
            time.sleep(0.05)
        stdout, stderr = p.communicate()
    return subprocess.CompletedProcess(cmd, p.returncode or 0, stdout, stderr), mem


def _verdict(stdout: str) -> str:
    return next((line for line in stdout.splitlines() if line.endswith("overall")), "(none printed)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--mb", type=float, default=100.0, help="size of each node log in MB (1e6 bytes)")
    ap.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--run", default="SMOKE", help="the run the logs belong to (--run of analyze)")
    ap.add_argument("--dir", type=Path, help="where the logs go (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the logs and the output folder")
    ap.add_argument("--cvs-tui", default=str(ROOT / ".venv/bin/cvs-tui"))
    args = ap.parse_args()

    work = args.dir or Path(tempfile.mkdtemp(prefix="analyze-big-"))
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    size = int(args.mb * 1e6)
    t0 = time.perf_counter()
    first = logs / "node0.log"
    steps = write_node_log(first, args.fixture, size)
    for i in range(1, args.nodes):
        shutil.copyfile(first, logs / f"node{i}.log")
    total = sum(p.stat().st_size for p in logs.glob("node*.log"))
    print(
        f"analyze_big: {args.nodes} node logs x {first.stat().st_size / 1e6:.1f} MB ({steps} steps each), "
        f"written in {time.perf_counter() - t0:.1f} s to {logs}"
    )
    for p in logs.glob("node*.log"):  # warm the page cache: the figure is the parser, not the disk
        with p.open("rb") as fh:
            while fh.read(1 << 24):
                pass
    env = dict(os.environ)
    maxtext = ROOT / ".venv-maxtext/bin/python"
    if "CVS_TUI_MAXTEXT_PYTHON" not in env and not maxtext.is_file():
        env["CVS_TUI_MAXTEXT_PYTHON"] = sys.executable  # named by the local config; nothing is launched
    out = work / "out"
    cmd = [args.cvs_tui, "analyze", str(args.config), "--logs", str(logs), "--run", args.run]
    cmd += ["--out", str(out), "--no-ui"]
    parse_mbs = parser_throughput(first, env)
    load = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc, mem = run_sampled(cmd, env)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage.ru_utime - before.ru_utime) + (usage.ru_stime - before.ru_stime)
    print(f"  command: {' '.join(cmd)}")
    print(f"  exit {proc.returncode}; verdict: {_verdict(proc.stdout)}")
    if proc.returncode not in (0, 1):
        print(proc.stderr.strip()[-2000:])
    cores = os.cpu_count() or 1
    ideal = total / 1e6 / (parse_mbs * min(cores, args.nodes))
    size = sum(p.stat().st_size for p in out.glob("*") if p.is_file()) if out.is_dir() else 0
    print(f"  load average before: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}, {cores} CPUs")
    print(
        f"  parser alone (one process, CPU time): {parse_mbs:.1f} MB/s per core -> {ideal:.1f} s on {cores}"
    )
    print(f"  wall {wall:.1f} s, CPU {cpu:.1f} s ({cpu / wall:.2f} cores), {total / 1e6 / wall:.1f} MB/s")
    print(
        f"  peak RSS: analyze process {mem['parent'] / 1024:.0f} MB, "
        f"largest worker {mem['worker'] / 1024:.0f} MB, "
        f"all processes together {mem['total'] / 1024:.0f} MB "
        f"(largest process by getrusage: {usage.ru_maxrss / 1024:.0f} MB)"
    )
    print(f"  output: {size / 1e6:.1f} MB in {out}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if proc.returncode in (0, 1) else proc.returncode


if __name__ == "__main__":
    sys.exit(main())
