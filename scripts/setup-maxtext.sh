#!/usr/bin/env bash
# Create (or verify) the Python >= 3.12 virtual environment that runs real MaxText on this machine.
#
#   scripts/setup-maxtext.sh [-v] [VENV_DIR]     (default: .venv-maxtext in the repository root)
#
# -v (or CVS_TUI_SETUP_VERBOSE=1) shows the installers' output; otherwise it goes to
# VENV_DIR/setup.log, whose tail is shown if a step fails. Long steps print a heartbeat.
#
# Interpreter search order (MaxText 0.2.x requires Python >= 3.12):
#   1. $CVS_TUI_PYTHON312
#   2. python3.12, then python3.13 on PATH, if it actually runs (a pyenv shim without a selected
#      version does not)
#   3. $(pyenv root)/versions/3.12.*/bin/python (the real binary, never the shim)
# Packages come from workload/requirements-maxtext.txt (a complete pinned freeze). uv installs them
# with --compile-bytecode, which matters where PYTHONDONTWRITEBYTECODE=1 would otherwise make every
# MaxText start recompile its imports; pip is the fallback. When uv is not on the PATH it is
# installed into VENV_DIR-uvtool (about 50 MB). uv's cache follows uv's own settings (UV_CACHE_DIR,
# UV_NO_CACHE).
#
# Idempotent: the stamp (the requirements hash) is written only after the trainer imported, so a
# venv whose stamp matches and whose trainer module is present is used as is (a check well under a
# second). The last line printed on stdout is always CVS_TUI_MAXTEXT_PYTHON=<venv>/bin/python.
#
# bootstrap.sh numbers these steps as phases 2 and 3 of its own set-up (CVS_SETUP_STEP_BASE=1,
# CVS_SETUP_STEP_TOTAL=3) and asks for silence when nothing needs doing (CVS_SETUP_QUIET_READY=1).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/setup-lib.sh
source "$REPO_ROOT/scripts/setup-lib.sh"
REQUIREMENTS="$REPO_ROOT/workload/requirements-maxtext.txt"
TRAINER_MODULE="maxtext.trainers.pre_train.train"
STAMP_NAME=".cvs-tui-requirements.sha256"
START_S=$(date +%s)
STEP_BASE=${CVS_SETUP_STEP_BASE:-0}
STEP_TOTAL=${CVS_SETUP_STEP_TOTAL:-2}
# Called by bootstrap.sh: its phase lines, its tag. On its own: this script's name.
((STEP_BASE > 0)) || CVS_SETUP_TAG=setup-maxtext:

VENV_ARG=""
for arg in "$@"; do
    case $arg in
    -v | --verbose) export CVS_TUI_SETUP_VERBOSE=1 ;;
    -h | --help) sed -n '2,25s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) printf 'setup-maxtext: error: unknown option %s (usage: setup-maxtext.sh [-v] [VENV_DIR])\n' "$arg" >&2; exit 2 ;;
    *) [[ -z $VENV_ARG ]] || { echo "setup-maxtext: error: more than one VENV_DIR given" >&2; exit 2; }
       VENV_ARG=$arg ;;
    esac
done
VENV_DIR="${VENV_ARG:-$REPO_ROOT/.venv-maxtext}"

log() { cvs_setup_say "$*"; }
die() { cvs_setup_say "error: $*"; exit 1; }
phase() { printf '[%d/%d]' $((STEP_BASE + $1)) "$STEP_TOTAL"; }

[[ -f "$REQUIREMENTS" ]] || die "missing $REQUIREMENTS (run from a complete checkout)"
mkdir -p "$(dirname "$VENV_DIR")"
VENV_DIR="$(cd "$(dirname "$VENV_DIR")" && pwd)/$(basename "$VENV_DIR")"
VENV_PY="$VENV_DIR/bin/python"
SHOW_DIR=$(cvs_setup_pretty "$VENV_DIR")
LOG="$VENV_DIR/setup.log"
SHOW_LOG=$(cvs_setup_pretty "$LOG")

# Two concurrent setups of the same venv would corrupt it; serialise them.
exec 9<"$REQUIREMENTS"
if ! flock -n 9 2>/dev/null; then
    log "waiting for another set-up of $SHOW_DIR to finish"
    flock 9 2>/dev/null || true
fi

# True when "$1" runs and is Python >= 3.12.
python_ok() {
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1
}

# Prints the interpreter to use; returns 1 when there is none (the caller reports it).
find_python() {
    if [[ -n "${CVS_TUI_PYTHON312:-}" ]]; then
        python_ok "$CVS_TUI_PYTHON312" && { echo "$CVS_TUI_PYTHON312"; return 0; }
        return 1
    fi
    local cand
    for cand in python3.12 python3.13; do
        if command -v "$cand" >/dev/null 2>&1 && python_ok "$cand"; then
            command -v "$cand"; return 0
        fi
    done
    if command -v pyenv >/dev/null 2>&1; then
        local root
        root="$(pyenv root 2>/dev/null || true)"
        for cand in "$root"/versions/3.12.*/bin/python; do
            [[ -x "$cand" ]] && python_ok "$cand" && { echo "$cand"; return 0; }
        done
    fi
    return 1
}

requirements_hash() {
    sha256sum "$REQUIREMENTS" | cut -d' ' -f1
}

# The full import ran when the stamp was written; here it is enough that the interpreter runs and
# the trainer module is still there (importing it costs ~10 s of CPU).
venv_ready() {
    [[ -x "$VENV_PY" ]] || return 1
    [[ -f "$VENV_DIR/$STAMP_NAME" ]] || return 1
    [[ "$(cat "$VENV_DIR/$STAMP_NAME")" == "$(requirements_hash)" ]] || return 1
    "$VENV_PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$TRAINER_MODULE') is None)" >/dev/null 2>&1
}

# What uv is doing, read from its log (it prints a line as each stage ends).
hint_uv() {
    if grep -q '^Bytecode compiled' "$1" 2>/dev/null; then
        echo "uv: listing what it installed"
    elif grep -q '^Installed ' "$1" 2>/dev/null; then
        echo "uv: compiling ~12k .py files to bytecode (longest step, silent)"  # fits 80 columns
    elif grep -q '^Prepared ' "$1" 2>/dev/null; then
        echo "uv: linking packages into $SHOW_DIR"
    elif grep -q '^Resolved ' "$1" 2>/dev/null; then
        echo "uv: fetching and unpacking wheels (jax, jaxlib, tensorflow-sized ones take longest)"
    else
        echo "uv: resolving the pinned versions"
    fi
}

hint_import() {
    echo "python: import $TRAINER_MODULE (jax, flax, orbax, first import after install)"
}

finish() {
    echo "CVS_TUI_MAXTEXT_PYTHON=$VENV_PY"
}

if venv_ready; then
    if [[ "${CVS_SETUP_QUIET_READY:-0}" != 1 ]]; then
        log "$( ((STEP_BASE == 0)) || echo "$(phase 1) ")$SHOW_DIR is up to date (requirements hash matches, trainer present; $(cvs_setup_dur $(($(date +%s) - START_S))))"
    fi
    finish
    exit 0
fi

if ! PY="$(find_python)"; then
    [[ -n "${CVS_TUI_PYTHON312:-}" ]] \
        && die "CVS_TUI_PYTHON312=$CVS_TUI_PYTHON312 is not a working Python >= 3.12; fix or unset it"
    die "no Python >= 3.12 found: install python3.12 (or pyenv install 3.12), or set CVS_TUI_PYTHON312=/path/to/python3.12"
fi
PYVER=$("$PY" -c 'import platform; print(platform.python_version())')
NPKG=$(grep -cv '^\s*\(#\|$\)' "$REQUIREMENTS")

T1=$(date +%s)
log "$(phase 1) MaxText environment $SHOW_DIR (Python $PYVER at $PY): $NPKG pinned packages, then ~12k files compiled to bytecode (about 1-2 min on 2 cores, ~1.4 GB; log: $SHOW_LOG)"
# A stale or half-built venv is rebuilt from scratch so the result equals the pinned freeze exactly.
if [[ -e "$VENV_DIR" ]]; then
    [[ -f "$VENV_DIR/pyvenv.cfg" ]] || die "$VENV_DIR exists and is not a virtual environment; remove it or pass another VENV_DIR"
    log "      removing the stale $SHOW_DIR first (its requirements stamp does not match or its trainer is missing)"
    rm -rf -- "$VENV_DIR"
fi
mkdir -p "$VENV_DIR"
printf '# %s: cvs-tui set-up, MaxText environment, %s (Python %s)\n' "$(date -u +%FT%TZ)" "$PY" "$PYVER" >"$LOG"
cvs_setup_step "$LOG" cvs_setup_hint_venv "$PY" -m venv "$VENV_DIR" || die "could not create $SHOW_DIR (see above)"

# uv: the one on PATH, else a small tool venv beside the target venv.
UV=""
if command -v uv >/dev/null 2>&1; then
    UV="$(command -v uv)"
else
    UV_TOOL_DIR="${VENV_DIR}-uvtool"
    if [[ ! -x "$UV_TOOL_DIR/bin/uv" ]]; then
        log "      uv is not on the PATH: installing it into $(cvs_setup_pretty "$UV_TOOL_DIR") (a few seconds, ~50 MB)"
        if cvs_setup_step "$LOG" cvs_setup_hint_venv "$PY" -m venv "$UV_TOOL_DIR" \
            && CVS_SETUP_DOING="installing uv" cvs_setup_step "$LOG" cvs_setup_hint_pip \
                "$UV_TOOL_DIR/bin/pip" install --progress-bar off --disable-pip-version-check uv; then
            :
        else
            log "      could not install uv; falling back to pip (slower, several minutes)"
        fi
    fi
    [[ -x "$UV_TOOL_DIR/bin/uv" ]] && UV="$UV_TOOL_DIR/bin/uv"
fi

installed=0
if [[ -n "$UV" ]]; then
    if cvs_setup_step "$LOG" hint_uv \
        env VIRTUAL_ENV="$VENV_DIR" "$UV" pip install --python "$VENV_PY" --compile-bytecode -r "$REQUIREMENTS"; then
        installed=1
        # uv's own summary lines, e.g. "Installed 124 packages in 819ms", "Bytecode compiled 12114 files in 1m 00s"
        summary=$(grep -E '^(Installed|Bytecode compiled) ' "$LOG" | paste -sd ';' - | sed 's/;/; /g')
        [[ -z $summary ]] || log "      uv: $summary"
    else
        log "      uv install failed; falling back to pip (slower, several minutes)"
    fi
fi
if (( ! installed )); then
    CVS_SETUP_DOING="installing the MaxText packages" cvs_setup_step "$LOG" cvs_setup_hint_pip \
        "$VENV_PY" -m pip install --progress-bar off --disable-pip-version-check -r "$REQUIREMENTS" \
        || die "installing the MaxText environment failed (see above)"
fi
log "$(phase 1) done in $(cvs_setup_dur $(($(date +%s) - T1)))"

T1=$(date +%s)
log "$(phase 2) checking that MaxText imports ($TRAINER_MODULE; about 10-30 s)"
cvs_setup_step "$LOG" hint_import "$VENV_PY" -c "import $TRAINER_MODULE" \
    || die "$SHOW_DIR was installed but 'import $TRAINER_MODULE' fails; run '$VENV_PY -c \"import $TRAINER_MODULE\"' to see why"
requirements_hash >"$VENV_DIR/$STAMP_NAME"
log "$(phase 2) done in $(cvs_setup_dur $(($(date +%s) - T1)))"
((STEP_BASE > 0)) || log "ready in $(cvs_setup_dur $(($(date +%s) - START_S))): $SHOW_DIR"
finish
