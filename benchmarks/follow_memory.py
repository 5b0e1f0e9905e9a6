"""Follow mode on inputs that never end or come fast: peak memory, bytes followed, and how soon SIGTERM
stops following (audit 3 H2, M6: RB02, RB03, RB09, FF21, FF22).

    python benchmarks/follow_memory.py [--mb 100] [--big-mb 200] [--seconds 60] [--baseline TREE]
        [--only NAME]

Each scenario runs `cvs-tui analyze CONFIG --follow --no-ui` in a fresh process until its copy in the run
folder holds ``--mb`` MB (the big log: all of it) or ``--seconds`` pass, then sends SIGTERM. Scenarios:

- ``reader-only``: the file follower alone reading that log to its end (no parsing, no judging): its
  peak RSS shows whether it hands bytes on as it reads (RB02: it read the whole file into a list first);
- ``file-big``: an existing log of ``--big-mb`` MB (the fixture's step lines renumbered upwards);
- ``stdin-fast``: a writer sends renumbered step lines on stdin as fast as they are read;
- ``stdin-zero``: `cat /dev/zero |` on stdin (no newline ever);
- ``fifo-urandom``: `cat /dev/urandom > FIFO`, the FIFO given with --logs;
- ``dev-zero``: `--logs /dev/zero` itself.

Printed per scenario: the peak RSS (VmHWM from /proc) of the cvs-tui process, the MB it copied into the
run folder and that rate, the seconds from SIGTERM until the copy stopped growing (following ended), the
seconds until the process exited (judging the copy comes in between), and its exit status. With
``--baseline TREE`` the same scenarios run with PYTHONPATH=TREE first, side by side. Every run has its
address space capped (``--cap-gb``) so a baseline that reads without bound stops at the cap, not at the
machine's memory; such a run shows "cap".

Figures, before -> after the bounded follower (2 cores shared with other jobs at load 18-35, so rates
and exit times are inflated; memory is not): reader-only on a 200 MB log, peak 222 -> 42 MB; dev-zero,
4079 MB (stopped by a 4 GB cap) -> refused at once, 0 MB; fifo-urandom, exit 2 after its writer (not
seekable) -> 24 MB followed, following stopped 0.12 s after SIGTERM, judged and exited 12 s later;
stdin-zero (40 MB), peak 146 -> 148 MB, stopped 0.07 -> 0.06 s after SIGTERM (a pipe was bounded already).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "maxtext" / "single_20steps.log"
CONFIG = ROOT / "configs" / "local" / "cpu_jaxmaxtext_tiny-llama_single.json"
RUN = "BS=2,PRECISION=BF16,SL=128"
STEP_LINE = (
    "I1130 07:28:34.235634 139736357583744 metric_logger.py:265] completed step: {n}, seconds: 0.056, "
    "TFLOP/s/device: 0.019, Tokens/s/device: 4597.206, total_weights: 256, loss: 7.501, lm_loss: 7.501, "
    "perplexity: 1810.470\n"
)
WRITER = (
    "import sys\n"
    "line = " + repr(STEP_LINE) + "\n"
    "out = sys.stdout.buffer\n"
    "n = 0\n"
    "try:\n"
    "    while True:\n"
    "        out.write(''.join(line.format(n=n + i) for i in range(2000)).encode()); n += 2000\n"
    "except (BrokenPipeError, KeyboardInterrupt):\n"
    "    pass\n"
)


def _big_log(path: Path, mb: int) -> None:
    head = FIXTURE.read_text().split("completed step:")[0].rsplit("\n", 1)[0] + "\n"
    with path.open("w") as fh:
        fh.write(head)
        n = 0
        while fh.tell() < mb << 20:
            fh.write("".join(STEP_LINE.format(n=n + i) for i in range(5000)))
            n += 5000


def _config(tmp: Path) -> Path:
    doc = json.loads(CONFIG.read_text())
    doc["train_params"]["python"] = "python3"
    doc["runs"] = [RUN]
    path = tmp / CONFIG.name
    path.write_text(json.dumps(doc))
    shutil.copy(CONFIG.parent / doc["threshold_json"], tmp / doc["threshold_json"])
    return path


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_one(tree: Path, name: str, tmp: Path, args: argparse.Namespace, big: Path) -> dict[str, object]:
    seconds, cap_gb, judge_wait = args.seconds, args.cap_gb, args.judge_wait
    target = big.stat().st_size if name == "file-big" else args.mb << 20
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp))
    cfg = _config(work)
    out = work / "out"
    env = {**os.environ, "PYTHONPATH": str(tree), "CVS_TUI_MAXTEXT_PYTHON": sys.executable}
    cmd = [sys.executable, "-m", "cvs_tui", "analyze", str(cfg), "--follow", "--no-ui", "--out", str(out)]
    stdin: int | None = subprocess.DEVNULL
    helper: subprocess.Popen[bytes] | None = None
    if name == "file-big":
        cmd += ["--logs", str(big)]
    elif name == "dev-zero":
        cmd += ["--logs", "/dev/zero"]
    elif name == "fifo-urandom":
        fifo = work / "pod.fifo"
        os.mkfifo(fifo)
        cmd += ["--logs", str(fifo)]
    else:
        cmd += ["--logs", "-"]
        src = [sys.executable, "-c", WRITER] if name == "stdin-fast" else ["cat", "/dev/zero"]
        helper = subprocess.Popen(src, stdout=subprocess.PIPE)
        stdin = helper.stdout.fileno() if helper.stdout else None

    def cap() -> None:
        limit = int(cap_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.Popen(
        cmd,
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=cap,
        cwd=work,  # not a checkout: `-m` puts the working folder before PYTHONPATH
    )
    if helper is not None and helper.stdout is not None:
        helper.stdout.close()
    if name == "fifo-urandom":
        helper = subprocess.Popen(["sh", "-c", f"cat /dev/urandom > {work / 'pod.fifo'}"])
    copy = out / "logs" / "BS_2_PRECISION_BF16_SL_128" / "node0.log"
    size = lambda: copy.stat().st_size if copy.exists() else 0  # noqa: E731
    peak = 0.0
    started = time.monotonic()  # the timer starts once following has (start-up is not measured)
    while not (out / "events.jsonl").exists() and proc.poll() is None and time.monotonic() - started < 60:
        time.sleep(0.05)
    t_start = time.monotonic()
    end = t_start + seconds
    while time.monotonic() < end and proc.poll() is None and size() < target:
        peak = max(peak, _rss_mb(proc.pid) or 0.0)
        time.sleep(0.1)
    took = max(time.monotonic() - t_start, 1e-9)
    followed = size()
    stop_s: float | None = None
    exit_s: float | None = None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        last, since = size(), t0
        while proc.poll() is None and time.monotonic() - t0 < judge_wait:
            peak = max(peak, _rss_mb(proc.pid) or 0.0)
            now_size = size()
            if now_size != last:
                last, since = now_size, time.monotonic()
            elif stop_s is None and time.monotonic() - since > 1.0:
                stop_s = since - t0  # the copy has not grown for a second: following ended at `since`
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        else:
            exit_s = time.monotonic() - t0
            if stop_s is None:
                stop_s = min(since - t0, exit_s)
    proc.wait()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if helper is not None:
        helper.kill()
        helper.wait()
    rc = proc.returncode
    capped = "MemoryError" in err or (rc == -9 and exit_s is None)
    shutil.rmtree(work, ignore_errors=True)
    return {
        "peak_mb": peak,
        "copied_mb": followed / (1 << 20),
        "rate": followed / (1 << 20) / took,
        "stop_s": stop_s,
        "exit_s": exit_s,
        "rc": "cap" if capped else rc,
        "note": err.strip().splitlines()[-1][:70] if err.strip() else "",
    }


READER = """
import asyncio, sys, time
from cvs_tui.core.watch.followers import FileFollower
async def go():
    f = FileFollower(sys.argv[1], poll_interval=0.01)
    t0, n, size = time.monotonic(), 0, int(sys.argv[2])
    async for data in f.chunks():
        n += len(data)
        if n >= size:
            f.stop()
    return n, time.monotonic() - t0
n, s = asyncio.run(go())
hwm = next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM'))
print(f"{n / 2**20:.0f} {s:.2f} {hwm / 1024:.0f}")
"""


def reader_only(tree: Path, big: Path) -> str:
    """The follower alone on the big log (no parsing, no judging): its peak RSS and read rate."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run(
        [sys.executable, "-c", READER, str(big), str(big.stat().st_size)],
        env=env,
        capture_output=True,
        text=True,
        cwd=big.parent,  # not a checkout: `-c` and `-m` put the working folder before PYTHONPATH
    )
    if r.returncode != 0:
        return f"failed: {r.stderr.strip().splitlines()[-1][:60]}"
    mb, s, hwm = r.stdout.split()
    return f"{hwm:>6} MB peak, {mb} MB read in {float(s):5.1f} s"


def _fmt(r: dict[str, object]) -> str:
    def s(v: object, f: str) -> str:
        return "-" if v is None else format(v, f)

    return (
        f"{s(r['peak_mb'], '7.0f')} MB {s(r['copied_mb'], '7.0f')} MB {s(r['rate'], '6.1f')} MB/s "
        f"stop {s(r['stop_s'], '5.2f')} s exit {s(r['exit_s'], '5.1f')} s rc {r['rc']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="the most one scenario follows")
    ap.add_argument("--mb", type=int, default=100, help="a scenario stops once its copy holds this much")
    ap.add_argument("--big-mb", type=int, default=200)
    ap.add_argument("--judge-wait", type=float, default=300.0, help="seconds allowed from SIGTERM to exit")
    ap.add_argument("--cap-gb", type=float, default=4.0)
    ap.add_argument("--baseline", type=Path, help="another checkout, run first with PYTHONPATH set to it")
    ap.add_argument("--only", action="append", help="scenario name (repeatable)")
    args = ap.parse_args()
    names = args.only or ["reader-only", "file-big", "stdin-fast", "stdin-zero", "fifo-urandom", "dev-zero"]
    with tempfile.TemporaryDirectory(prefix="cvs-follow-bench-") as t:
        tmp = Path(t)
        big = tmp / "big.log"
        _big_log(big, args.big_mb)
        print(
            f"load {os.getloadavg()[0]:.1f}; each scenario follows until its copy holds {args.mb} MB "
            f"(the big log: all {args.big_mb} MB) or {args.seconds:g} s pass, then SIGTERM"
        )
        for name in names:
            line = f"{name:13}"
            if name == "reader-only":
                if args.baseline:
                    line += f"  before {reader_only(args.baseline, big)}  |"
                print(f"{line}  after {reader_only(ROOT, big)}", flush=True)
                continue
            if args.baseline:
                base = run_one(args.baseline, name, tmp, args, big)
                line += f"  before {_fmt(base)}  |"
            now = run_one(ROOT, name, tmp, args, big)
            line += f"  after {_fmt(now)}"
            print(line, flush=True)
            if now["note"]:
                print(f"{'':13}  after: {now['note']}")


if __name__ == "__main__":
    main()
