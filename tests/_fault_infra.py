"""Set-up for the fault-injection and fail-closed tests: a suite on the loopback sshd nodes whose trainer
is a small POSIX sh script written by the test (a test double for the trainer only: the tests are about
how cvs-tui starts, follows, judges and stops a trainer, and the fault is the trainer's behaviour or
the machine's), printing MaxText-format lines.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from suite_fixtures.helpers import TRAINER, Setup, make_setup, processes_with

# A MaxText-shaped log: `header`, then `steps FROM TO` prints completed-step lines with a falling loss,
# CVS_FAULT_SLEEP seconds apart; timestamps are SKEW seconds off this machine's clock when it is set.
PRELUDE = r"""set -u
CONFIG=${1:?}
RANK=${NODE_RANK:-0}
SLEEP=${CVS_FAULT_SLEEP:-0.05}
ts() {
  if [ -n "${SKEW:-}" ]; then date -u -d "@$(( $(date +%s) + SKEW ))" +%H:%M:%S.000000
  else date -u +%H:%M:%S.000000; fi
}
info() { printf 'I1130 %s 140000000000001 %s] %s\n' "$(ts)" "$1" "$2"; }
header() {
  info max_utils.py:835 "System Information: Jax Version: 0.0.0-standin"
  info max_utils.py:837 "System Information: Jax Backend: cpu"
  info maxtext_utils.py:2098 "Num_devices: 1, shape (1, 1, 1)"
  echo "Per train step:"
  echo " Total TFLOPs: 0.00 "
}
steps() {
  s=$1
  while [ "$s" -lt "$2" ]; do
    m=$((8000 - s * 200)); [ "$m" -lt 100 ] && m=100
    l=$(printf '%d.%03d' $((m / 1000)) $((m % 1000)))
    info metric_logger.py:265 "completed step: $s, seconds: 0.050, TFLOP/s/device: 1.0, \
Tokens/s/device: 1000.0, total_weights: 256, loss: $l, lm_loss: $l, perplexity: 2980.958"
    s=$((s + 1))
    sleep "$SLEEP"
  done
}
"""


def fault_setup(tmp_path: Path, body: str, *, steps: int = 8, runtime: str = "host", **kw: object) -> Setup:
    """A two-node setup whose trainer is PRELUDE + ``body``, for a sweep of ``steps`` steps."""
    from suite_fixtures.helpers import SWEEP

    s = make_setup(tmp_path, runtime=runtime, sweeps={SWEEP: {"steps": steps}}, **kw)  # type: ignore[arg-type]
    script = s.root / "bin" / TRAINER.name
    script.write_text(PRELUDE + body)
    return s


def left_running(s: Setup) -> list[str]:
    """Live processes on this machine (the nodes share it) started from the test's trainer script."""
    return processes_with(s.marker())


def pgrep(pattern: str) -> list[str]:
    """``pgrep -af PATTERN`` on the host, without this test process."""
    out = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if not ln.startswith(f"{os.getpid()} ")]


def no_traceback(text: str) -> bool:
    return "Traceback (most recent call last)" not in text
