"""The per-node launcher script: environment, train-script choice, process group and exit status.

The script is generated here and written to the node as a file; the node runs it detached (its own
session), so it survives the SSH channel that started it. What it guarantees:

* every environment value is exported through ``shlex.quote``, so quotes, ``$()``, ``;`` and newlines
  reach the trainer unchanged and are never executed;
* the Hugging Face token is read from a file on the node into ``HF_TOKEN`` (never written into the
  script, never echoed; ``set +x``);
* the first existing ``train_script_paths`` entry runs: a file path runs as ``python PATH``, a
  ``module:pkg.mod`` entry (probed with importlib) runs as ``python -m pkg.mod``;
* the trainer runs in its own process group (``setsid``) with stdout and stderr merged and appended to
  the node log; its pgid goes to ``<log>.pid`` so teardown can stop the whole group;
* the trainer's real exit status (128+N after signal N) goes, as the log's last line, ``EXIT_CODE=<n>``
  (on a line of its own even when the trainer's output did not end in a newline) and then to
  ``<log>.exit``: a crash that prints no known error line is still seen as a failure, and once the
  ``.exit`` file exists the log is complete. Only the ``.exit`` file is the exit status: a trainer can
  print ``EXIT_CODE=0`` itself;
* a ``<log>.cancel`` file (written by :func:`kill_group_command`) stops the launcher before it starts
  the trainer, and makes it stop a trainer it started just as the flag appeared.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cvs_tui.core.errors import UserError
from cvs_tui.core.transport import expanding_quote

MODULE_PREFIX = "module:"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_EXIT_LINE = re.compile(rb"(?:^|\n)EXIT_CODE=(-?\d+)\n?$")
_PROBE = "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 1)"

# Exit statuses the launcher itself uses before a trainer exists.
RC_SETUP_FAILED = 2
RC_NO_TRAIN_SCRIPT = 127


def exit_file(log_path: str) -> str:
    return f"{log_path}.exit"


def pid_file(log_path: str) -> str:
    return f"{log_path}.pid"


def cancel_file(log_path: str) -> str:
    return f"{log_path}.cancel"


JOB_TOKEN_ENV = "CVS_TUI_JOB"  # a per-rank nonce in the trainer's environment: how its processes are found
RC_CANCELLED = 143  # as if TERM had stopped the trainer


@dataclass(frozen=True)
class LaunchSpec:
    """Everything one node's launcher needs. Paths are paths on the node (inside the container)."""

    log_path: str
    config_path: str  # the MaxText YAML
    train_script_paths: Sequence[str]
    python: str = "python3"
    env: Mapping[str, str] = field(default_factory=dict)
    extra_args: Sequence[str] = ()  # key=value overrides after the YAML
    workdir: str | None = None
    hf_token_file: str | None = None
    label: str = ""  # e.g. "run SMOKE node 0", a comment in the script
    # Exported before ``env`` (the cluster file's env_vars) and after it (HF_HOME, PYTHONPATH,
    # LD_LIBRARY_PATH as upstream's launcher sets them); in both, ``$NAME`` references expand.
    pre_env: Mapping[str, str] = field(default_factory=dict)
    post_env: Mapping[str, str] = field(default_factory=dict)


def _q(v: str) -> str:
    return shlex.quote(str(v))


def _check(spec: LaunchSpec) -> None:
    """Every bad env name and train script entry, in one UserError."""
    names = [*spec.pre_env, *spec.env, *spec.post_env]
    problems = [
        f"env: {k!r} is not a valid environment variable name" for k in names if not _ENV_NAME.match(k)
    ]
    if not spec.train_script_paths:
        problems.append("train_params.train_script_paths: empty; list at least one train script")
    for entry in spec.train_script_paths:
        if entry.startswith(MODULE_PREFIX) and not _MODULE.match(entry[len(MODULE_PREFIX) :]):
            problems.append(f"train_params.train_script_paths: {entry!r} is not module:package.module")
    if problems:
        raise UserError(problems)


def _train_script_branches(spec: LaunchSpec, cancelled: str) -> list[str]:
    """``set --`` the first of train_script_paths the node has (a file, or ``module:`` a module its
    python imports); else fail, or say it was cancelled."""
    out: list[str] = []
    tail_args = " ".join(_q(a) for a in [spec.config_path, *spec.extra_args])
    branches = []
    for entry in spec.train_script_paths:
        if entry.startswith(MODULE_PREFIX):
            mod = entry[len(MODULE_PREFIX) :]
            cond = f'"$PY" -c {_q(_PROBE)} {_q(mod)} >/dev/null 2>&1'
            run = f'set -- "$PY" -m {_q(mod)} {tail_args}'
        else:
            cond = f"[ -f {_q(entry)} ]"
            run = f'set -- "$PY" {_q(entry)} {tail_args}'
        branches.append((cond, run))
    listed = ", ".join(spec.train_script_paths)
    for i, (cond, run) in enumerate(branches):
        out.append(f"{'if' if i == 0 else 'elif'} {cond}; then {run}")
    out.append(
        f"else {cancelled}; fail {_q('none of train_script_paths exist on this node: ' + listed)} "
        f"{RC_NO_TRAIN_SCRIPT}"
    )
    out.append("fi")
    return out


def build_launcher(spec: LaunchSpec) -> str:
    """The launcher script text (bash; also valid for busybox ash), one template read top to bottom in
    the order the node runs it. Raises UserError on bad names."""
    _check(spec)
    log = _q(spec.log_path)
    lines = [
        "#!/usr/bin/env bash",
        f"# cvs-tui launcher{': ' + spec.label.replace(chr(10), ' ') if spec.label else ''}",
        "set +x",
        "set -o pipefail",
        f"LOG={log}",
        f"EXIT_FILE={_q(exit_file(spec.log_path))}",
        f"PID_FILE={_q(pid_file(spec.log_path))}",
        'rm -f -- "$EXIT_FILE" "$PID_FILE"',
        'mkdir -p -- "$(dirname -- "$LOG")" || exit 2',
        f"CANCEL_FILE={_q(cancel_file(spec.log_path))}",
        # the EXIT_CODE line first, on a line of its own, then the .exit file: once that file exists
        # the log is complete
        # A step-wide TERM (Slurm's time limit sends two) must not kill the mv below and lose the status:
        # an ignored signal stays ignored in the children.
        "finish() {",
        "  trap '' TERM INT HUP",
        '  if [ -s "$LOG" ] && [ -n "$(tail -c 1 -- "$LOG")" ]; then printf \'\\n\' >> "$LOG"; fi',
        '  printf \'EXIT_CODE=%s\\n\' "$1" >> "$LOG"',
        '  printf \'%s\\n\' "$1" > "$EXIT_FILE.tmp" && mv -f -- "$EXIT_FILE.tmp" "$EXIT_FILE"',
        '  exit "$1"',
        "}",
        "fail() {",
        '  printf \'cvs-tui launcher: %s\\n\' "$1" >> "$LOG"',
        '  finish "$2"',
        "}",
    ]
    for k, v in spec.pre_env.items():
        lines.append(f"export {k}={expanding_quote(v)}")
    for k, v in spec.env.items():
        lines.append(f"export {k}={_q(v)}")
    for k, v in spec.post_env.items():
        lines.append(f"export {k}={expanding_quote(v)}")
    if spec.hf_token_file:
        tok = _q(spec.hf_token_file)
        msg = _q(f"HF token file {spec.hf_token_file} is not readable on this node")
        lines += [
            f"[ -r {tok} ] || fail {msg} {RC_SETUP_FAILED}",
            f"HF_TOKEN=$(cat -- {tok}) || fail {msg} {RC_SETUP_FAILED}",
            "export HF_TOKEN",
        ]
    if spec.workdir:
        lines.append(
            f"cd -- {_q(spec.workdir)} || fail {_q('cannot cd to ' + spec.workdir)} {RC_SETUP_FAILED}"
        )
    lines.append(f"PY={_q(spec.python)}")
    why = _q("cancelled by cvs-tui before the trainer started")
    cancelled = f'[ -e "$CANCEL_FILE" ] && fail {why} {RC_CANCELLED}'
    lines += _train_script_branches(spec, cancelled)
    lines += [
        cancelled,
        # Own process group (pgid = pid): teardown stops the trainer and everything it started at once.
        'setsid "$@" >> "$LOG" 2>&1 < /dev/null &',
        "TRAINER=$!",
        'printf \'%s\\n\' "$TRAINER" > "$PID_FILE"',
        # a cancel that came while it started: the stopper may have looked before the trainer existed
        '[ -e "$CANCEL_FILE" ] && kill -TERM "-$TRAINER" 2>/dev/null',
        'wait "$TRAINER"',
        'finish "$?"',
        "",
    ]
    return "\n".join(lines)


def launch_command(script_path: str) -> str:
    """The command that runs a launcher script with bash (or ``sh`` where an image has no bash)."""
    s = _q(script_path)
    return f"if command -v bash >/dev/null 2>&1; then exec bash {s}; else exec sh {s}; fi"


def kill_group_command(log_path: str, grace_s: float = 10.0, token: str | None = None) -> str:
    """Stop a rank for good: cancel its launcher, TERM the trainer's group, wait up to ``grace_s``, KILL.

    Run where the launcher ran (inside the container: its pid namespace). It first writes the cancel
    flag, so a launcher still starting up never starts the trainer. The group comes from ``<log>.pid``
    only when that holds a number above 1 whose process carries ``token`` (the trainer can write that
    file: a ``1`` there must never become ``kill -1``). With ``token``, every process whose environment
    holds it is stopped too: children that left the group with setsid. It then checks: exit 0 when
    nothing is left (and the launcher finished, or never started within 5 s), exit 1 naming what is.
    """
    steps = max(1, int(grace_s / 0.2))
    pf, ef, cf = _q(pid_file(log_path)), _q(exit_file(log_path)), _q(cancel_file(log_path))
    pat = _q(f"{JOB_TOKEN_ENV}={token}") if token else ""
    if token:
        mine = f"mine() {{ {scan_command(token)}; }}; "
        owned = f"environ_has /proc/$pg {pat}"
    else:
        mine = "mine() { :; }; "
        owned = '[ "$pg" != "$$" ]'
    return (
        f": > {cf} 2>/dev/null; {ENVIRON_HAS}{mine}"
        "group() { "
        f"pg=$(head -c 32 -- {pf} 2>/dev/null | tr -d ' \\n'); "
        'case "$pg" in ""|*[!0-9]*) pg=;; esac; '
        f'if [ -n "$pg" ] && [ "$pg" -gt 1 ] && {owned}; then :; else pg=; fi; }}; '
        'sig() { [ -n "$pg" ] && kill "-$1" "-$pg" 2>/dev/null; '
        'for p in $left; do kill "-$1" "$p" 2>/dev/null; done; }; '
        "i=0; while :; do "
        'group; left=$(mine | tr "\\n" " "); alive=; '
        '[ -n "$pg" ] && kill -0 "-$pg" 2>/dev/null && alive="group $pg"; '
        f'if [ -z "$left$alive" ] && {{ [ -e {ef} ] || [ $i -ge 25 ]; }}; then exit 0; fi; '
        f'if [ $i -ge {steps + 25} ]; then echo "still running: $alive $left"; exit 1; fi; '
        f"if [ $i -lt {steps} ]; then sig TERM; else sig KILL; fi; "
        "sleep 0.2; i=$((i+1)); done"
    )


# environ_has DIR NAME=VALUE: the process /proc/<pid> DIR was started with that variable. (busybox grep
# stops at the first NUL of /proc/<pid>/environ, so the entries are split into lines first.)
ENVIRON_HAS = (
    'environ_has() { [ -O "$1" ] && tr "\\0" "\\n" 2>/dev/null < "$1/environ" | grep -qxF -- "$2"; }; '
)


def scan_command(*tokens: str) -> str:
    """Prints the pid of every process of this user (not the shell itself) started with one of the job
    ``tokens`` in its environment; needs :data:`ENVIRON_HAS` defined first."""
    pats = " ".join(_q(f"{JOB_TOKEN_ENV}={t}") for t in tokens)
    return (
        'for d in /proc/[0-9]*; do [ "${d#/proc/}" = "$$" ] && continue; '
        f'for t in {pats}; do environ_has "$d" "$t" && {{ echo "${{d#/proc/}}"; break; }}; done; done'
    )


def read_exit_command(log_path: str) -> str:
    """Prints the recorded exit status, or nothing while the trainer runs."""
    return f"cat -- {_q(exit_file(log_path))} 2>/dev/null || true"


def parse_exit_status(text: str) -> int | None:
    """The exit status from ``<log>.exit`` contents; None when absent or malformed."""
    s = text.strip()
    return int(s) if re.fullmatch(r"-?\d+", s) else None


def exit_code_from_log_tail(data: bytes) -> int | None:
    """``EXIT_CODE=<n>`` when it is the last line of ``data`` (the end of a node log), else None."""
    m = _EXIT_LINE.search(data)
    return int(m.group(1)) if m else None
