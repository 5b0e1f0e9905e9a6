"""Command-line start-up: wall time of common cvs-tui commands next to a bare ``python -c pass``.

    python benchmarks/cli_startup.py [--repeat 5] [--cvs-tui PATH] [--config CONFIG] [--log LOG]
        [--run KEY] [--no-analyze]

Runs each command ``--repeat`` times in a fresh process (after one untimed warm-up run, so the
page cache is warm) and prints the median and the minimum wall time, the minimum over the bare
interpreter's minimum, and the minimum CPU time (user + system, which a loaded machine inflates far
less than wall time): ``--version``, ``--help``,
``config list``, ``config validate``, ``plan``, and ``analyze`` of a fixture log with ``--no-ui``.
The cvs-tui used is the installed ``.venv/bin/cvs-tui`` of the checkout this script is in, and the
baseline is the same interpreter running ``-c pass``. A command that exits non-zero is reported as
failed with its last error line, not timed.

It also lists what ``cvs-tui --version`` imports (``python -X importtime``): how many modules,
against a bare interpreter, whether the heavy ones (asyncssh, aiodocker, textual, the log parser)
are among them, and the five largest by cumulative import time.

The local configs name their MaxText interpreter as ``{env.CVS_TUI_MAXTEXT_PYTHON}``. When that
variable is unset, the checkout's ``.venv-maxtext/bin/python`` is used if it exists; otherwise the
commands that read a config are skipped with the reason. The machine's load average is printed,
since other work on a shared machine inflates every figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "configs/local/cpu_jaxmaxtext_tiny-llama_single.json"
DEFAULT_LOG = ROOT / "tests/fixtures/maxtext/single_20steps.log"
DEFAULT_RUN = "SMOKE"
# Top-level packages that a command which opens no connection and draws no screen should not need.
HEAVY = ("asyncssh", "aiodocker", "aiohttp", "cryptography", "textual", "rich", "matplotlib")
PARSER = "cvs_tui.core.parse"


@dataclass
class Timing:
    label: str
    times: list[float]
    error: str = ""
    cpu: list[float] = field(default_factory=list)  # user + system seconds of each timed run


def time_command(label: str, argv: list[str], repeat: int, env: dict[str, str]) -> Timing:
    """One untimed warm-up run, then ``repeat`` timed runs; stops at the first non-zero exit."""
    times: list[float] = []
    cpu: list[float] = []
    for i in range(repeat + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            return Timing(label, [], f"exit {proc.returncode}: {lines[-1] if lines else ''}")
        if i:
            times.append(elapsed)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return Timing(label, times, cpu=cpu)


def imported_modules(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, int]]:
    """Module names in import order and their cumulative import time (µs), from -X importtime."""
    proc = subprocess.run(
        [sys.executable if argv[0] == "-" else argv[0], "-X", "importtime", *argv[1:]],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    names: list[str] = []
    cumulative: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line.removeprefix("import time:").split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue  # the header line
        name = parts[2].strip()
        names.append(name)
        cumulative[name] = int(parts[1])
    return names, cumulative


def has(names: list[str], package: str) -> bool:
    return any(n == package or n.startswith(package + ".") for n in names)


def print_imports(python: str, cvs_tui: Path, env: dict[str, str]) -> None:
    bare, _ = imported_modules([python, "-c", "pass"], env)
    names, cumulative = imported_modules([python, str(cvs_tui), "--version"], env)
    if not names:
        print("\nimports of `cvs-tui --version`: none recorded (-X importtime printed nothing)")
        return
    print(f"\nimports of `cvs-tui --version`: {len(names)} modules (bare python: {len(bare)})")
    for pkg in (*HEAVY, PARSER):
        print(f"  {pkg:<22} {'IMPORTED' if has(names, pkg) else 'not imported'}")
    top = sorted(cumulative.items(), key=lambda kv: kv[1], reverse=True)[:5]
    print("  largest by cumulative import time:")
    for name, us in top:
        print(f"    {us / 1000:8.1f} ms  {name}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per command (default 5)")
    ap.add_argument("--cvs-tui", type=Path, default=ROOT / ".venv/bin/cvs-tui")
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--log", type=Path, default=DEFAULT_LOG, help="node log for `analyze`")
    ap.add_argument("--run", default=DEFAULT_RUN, help="the run key the log belongs to")
    ap.add_argument("--no-analyze", action="store_true", help="leave out `analyze` (the slow one)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    exe: Path = args.cvs_tui
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe} not found: run `bash scripts/bootstrap.sh` first (or pass --cvs-tui)")
    python = str(exe.parent / "python")

    env = dict(os.environ)
    skip_config = ""
    if not env.get("CVS_TUI_MAXTEXT_PYTHON"):
        local = ROOT / ".venv-maxtext/bin/python"
        if local.exists():
            env["CVS_TUI_MAXTEXT_PYTHON"] = str(local)
        else:
            skip_config = "CVS_TUI_MAXTEXT_PYTHON unset and no .venv-maxtext here"

    load = os.getloadavg()
    version = subprocess.run([python, "-V"], capture_output=True, text=True, check=False)
    print(f"cli_startup: {args.repeat} timed runs each (after one warm-up), {exe}")
    print(
        f"  {version.stdout.strip()}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min)"
    )

    cfg = str(args.config)
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        analyze = [str(exe), "analyze", cfg, "--logs", str(args.log), "--run", args.run]
        commands: list[tuple[str, list[str], bool]] = [
            ("python -c pass", [python, "-c", "pass"], False),
            ("cvs-tui --version", [str(exe), "--version"], False),
            ("cvs-tui --help", [str(exe), "--help"], False),
            ("cvs-tui config list", [str(exe), "config", "list"], False),
            ("cvs-tui config validate CONFIG", [str(exe), "config", "validate", cfg], True),
            ("cvs-tui plan CONFIG", [str(exe), "plan", cfg], True),
            ("cvs-tui analyze CONFIG --logs LOG --no-ui", [*analyze, "--no-ui", "--out", tmp], True),
        ]
        results: list[Timing] = []
        if args.no_analyze:
            commands = [c for c in commands if not c[0].startswith("cvs-tui analyze")]
        for label, argv, needs_config in commands:
            if needs_config and skip_config:
                results.append(Timing(label, [], f"skipped: {skip_config}"))
                continue
            results.append(time_command(label, argv, args.repeat, env))

    # min of N: the run least disturbed by other work on the machine; CPU = user + system time, which a
    # loaded machine inflates far less than wall time
    base = min(results[0].times) if results[0].times else 0.0
    print(f"\n{'command':<44} {'median':>9} {'min':>9} {'min - pass':>11} {'min CPU':>9}")
    for r in results:
        if not r.times:
            print(f"{r.label:<44} {r.error}")
            continue
        med = statistics.median(r.times)
        extra = "" if r is results[0] else f"+{min(r.times) - base:.3f} s"
        print(f"{r.label:<44} {med:>7.3f} s {min(r.times):>7.3f} s {extra:>11} {min(r.cpu):>7.3f} s")
    print(f"  config: {cfg}\n  log:    {args.log} (--run {args.run})")

    print_imports(python, exe, env)
    return 1 if any(r.error and not r.error.startswith("skipped") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
