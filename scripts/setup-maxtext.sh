#!/usr/bin/env bash
# Create (or verify) the Python >= 3.12 virtual environment that runs real MaxText on this machine.
#
#   scripts/setup-maxtext.sh [VENV_DIR]        (default: .venv-maxtext in the repository root)
#
# Interpreter search order (MaxText 0.2.x requires Python >= 3.12):
#   1. $CVS_TUI_PYTHON312
#   2. python3.12, then python3.13 on PATH, if it actually runs (a pyenv shim without a selected
#      version does not)
#   3. $(pyenv root)/versions/3.12.*/bin/python (the real binary, never the shim)
# Packages come from workload/requirements-maxtext.txt (a complete pinned freeze). uv installs them
# with --compile-bytecode, which matters where PYTHONDONTWRITEBYTECODE=1 would otherwise make every
# MaxText start recompile its imports; pip is the fallback. uv's cache follows uv's own settings
# (UV_CACHE_DIR, UV_NO_CACHE).
#
# Idempotent: when the venv imports the trainer and its stamp matches the requirements hash, nothing
# is installed. The last line printed on stdout is always CVS_TUI_MAXTEXT_PYTHON=<venv>/bin/python.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQUIREMENTS="$REPO_ROOT/workload/requirements-maxtext.txt"
VENV_DIR="${1:-$REPO_ROOT/.venv-maxtext}"
TRAINER_MODULE="maxtext.trainers.pre_train.train"
STAMP_NAME=".cvs-tui-requirements.sha256"
START_S=$(date +%s)

log() { printf 'setup-maxtext: %s\n' "$*" >&2; }
die() { printf 'setup-maxtext: error: %s\n' "$*" >&2; exit 1; }

[[ -f "$REQUIREMENTS" ]] || die "missing $REQUIREMENTS (run from a complete checkout)"
mkdir -p "$(dirname "$VENV_DIR")"
VENV_DIR="$(cd "$(dirname "$VENV_DIR")" && pwd)/$(basename "$VENV_DIR")"
VENV_PY="$VENV_DIR/bin/python"

# Two concurrent setups of the same venv would corrupt it; serialise them.
exec 9<"$REQUIREMENTS"
flock 9 2>/dev/null || true

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

venv_ready() {
    [[ -x "$VENV_PY" ]] || return 1
    [[ -f "$VENV_DIR/$STAMP_NAME" ]] || return 1
    [[ "$(cat "$VENV_DIR/$STAMP_NAME")" == "$(requirements_hash)" ]] || return 1
    "$VENV_PY" -c "import $TRAINER_MODULE" >/dev/null 2>&1
}

finish() {
    log "done in $(( $(date +%s) - START_S )) s"
    echo "CVS_TUI_MAXTEXT_PYTHON=$VENV_PY"
}

if venv_ready; then
    log "$VENV_DIR is up to date (requirements hash matches, trainer imports)"
    finish
    exit 0
fi

if ! PY="$(find_python)"; then
    [[ -n "${CVS_TUI_PYTHON312:-}" ]] \
        && die "CVS_TUI_PYTHON312=$CVS_TUI_PYTHON312 is not a working Python >= 3.12; fix or unset it"
    die "no Python >= 3.12 found: install python3.12 (or pyenv install 3.12), or set CVS_TUI_PYTHON312=/path/to/python3.12"
fi
log "using $PY ($("$PY" -c 'import platform; print(platform.python_version())'))"

# A stale or half-built venv is rebuilt from scratch so the result equals the pinned freeze exactly.
if [[ -e "$VENV_DIR" ]]; then
    [[ -f "$VENV_DIR/pyvenv.cfg" ]] || die "$VENV_DIR exists and is not a virtual environment; remove it or pass another VENV_DIR"
    log "rebuilding stale $VENV_DIR"
    rm -rf -- "$VENV_DIR"
fi
"$PY" -m venv "$VENV_DIR"

# uv: the one on PATH, else a small tool venv beside the target venv.
UV=""
if command -v uv >/dev/null 2>&1; then
    UV="$(command -v uv)"
else
    UV_TOOL_DIR="${VENV_DIR}-uvtool"
    if [[ ! -x "$UV_TOOL_DIR/bin/uv" ]]; then
        log "installing uv into $UV_TOOL_DIR"
        if "$PY" -m venv "$UV_TOOL_DIR" >/dev/null 2>&1 \
            && "$UV_TOOL_DIR/bin/pip" install --quiet --disable-pip-version-check uv >&2; then
            :
        else
            log "could not install uv; falling back to pip"
        fi
    fi
    [[ -x "$UV_TOOL_DIR/bin/uv" ]] && UV="$UV_TOOL_DIR/bin/uv"
fi

installed=0
if [[ -n "$UV" ]]; then
    log "installing $(grep -cv '^\s*\(#\|$\)' "$REQUIREMENTS") pinned packages with uv"
    if VIRTUAL_ENV="$VENV_DIR" "$UV" pip install --python "$VENV_PY" --compile-bytecode \
        -r "$REQUIREMENTS" >&2; then
        installed=1
    else
        log "uv install failed; falling back to pip"
    fi
fi
if (( ! installed )); then
    log "installing pinned packages with pip (slower)"
    "$VENV_PY" -m pip install --disable-pip-version-check --quiet -r "$REQUIREMENTS" >&2
fi

log "checking that $TRAINER_MODULE imports"
"$VENV_PY" -c "import $TRAINER_MODULE" >/dev/null 2>&1 \
    || die "$VENV_DIR was installed but 'import $TRAINER_MODULE' fails; run '$VENV_PY -c \"import $TRAINER_MODULE\"' to see why"
requirements_hash >"$VENV_DIR/$STAMP_NAME"
finish
