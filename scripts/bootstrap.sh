#!/usr/bin/env bash
# Creates the tool's environment (.venv, Python >= 3.11) and the MaxText workload environment
# (.venv-maxtext, Python >= 3.12), then exports CVS_TUI_MAXTEXT_PYTHON. Idempotent: once set up, a
# run only checks and prints one line. Sourced by demo.sh and test.sh; also runs on its own:
#
#   bash scripts/bootstrap.sh [-v]      (-v, or CVS_TUI_SETUP_VERBOSE=1: show installer output)
#
# Each phase says what it does and about how long it takes; long steps print a heartbeat. Installer
# output goes to .venv/setup.log and .venv-maxtext/setup.log, shown on screen only on failure.
set -euo pipefail

_cvs_bootstrap() {
    local root stamp want py pyver log t0 t1 mstamp mbefore did=0
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    cd "$root"
    # shellcheck source=scripts/setup-lib.sh
    source "$root/scripts/setup-lib.sh"
    t0=$(date +%s)

    stamp=.venv/.cvs-tui-installed
    want=$(cat pyproject.toml setup.py cvs_tui/core/parse/_native.c | sha256sum | cut -c1-16)
    if [[ ! -x .venv/bin/cvs-tui || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
        did=1
        t1=$(date +%s)
        if [[ -x .venv/bin/python ]]; then
            py=.venv/bin/python
        else
            py=$(_cvs_pick_python311) || return 1
        fi
        pyver=$("$py" -c 'import platform; print(platform.python_version())')
        log=.venv/setup.log
        if [[ -x .venv/bin/python ]]; then
            cvs_setup_say "[1/3] updating .venv (Python $pyver): installing cvs-tui with its C log scanner, and the test tools pytest, ruff, mypy, hypothesis and import-linter (about 1-2 min, ~390 MB; log: $log)"
            printf '# %s: cvs-tui set-up, tool environment\n' "$(date -u +%FT%TZ)" >"$log"
        else
            cvs_setup_say "[1/3] creating .venv (Python $pyver): installing cvs-tui with its C log scanner, and the test tools pytest, ruff, mypy, hypothesis and import-linter (about 1-2 min, ~390 MB; log: $log)"
            mkdir -p .venv
            printf '# %s: cvs-tui set-up, tool environment\n' "$(date -u +%FT%TZ)" >"$log"
            cvs_setup_step "$log" cvs_setup_hint_venv "$py" -m venv .venv
        fi
        CVS_SETUP_DOING="upgrading pip" cvs_setup_step "$log" cvs_setup_hint_pip \
            .venv/bin/python -m pip install --progress-bar off --upgrade pip
        CVS_SETUP_DOING="installing cvs-tui[test]" cvs_setup_step "$log" cvs_setup_hint_pip \
            .venv/bin/python -m pip install --progress-bar off -e '.[test]'
        # an earlier install's emptied package folder would shadow the editable install
        find .venv/lib/python3*/site-packages/cvs_tui -depth -type d -empty -delete 2>/dev/null || true
        echo "$want" >"$stamp"
        cvs_setup_say "[1/3] done in $(cvs_setup_dur $(($(date +%s) - t1)))"
    fi

    # Phases 2 and 3. When .venv was already current and so is .venv-maxtext, it prints nothing and
    # the one line below is the whole output.
    mstamp=.venv-maxtext/.cvs-tui-requirements.sha256
    mbefore=$(stat -c %Y.%i "$mstamp" 2>/dev/null || true)
    CVS_SETUP_STEP_BASE=1 CVS_SETUP_STEP_TOTAL=3 CVS_SETUP_QUIET_READY=$((1 - did)) \
        bash scripts/setup-maxtext.sh .venv-maxtext >/dev/null
    export CVS_TUI_MAXTEXT_PYTHON="$root/.venv-maxtext/bin/python"
    # setup-maxtext.sh rewrites its stamp only after a build
    [[ "$(stat -c %Y.%i "$mstamp" 2>/dev/null || true)" == "$mbefore" ]] || did=1
    if ((did)); then
        cvs_setup_say "ready in $(cvs_setup_dur $(($(date +%s) - t0))): .venv (cvs-tui), .venv-maxtext (MaxText); later runs skip all of this"
    else
        cvs_setup_say "ready: .venv and .venv-maxtext are up to date"
    fi
}

_cvs_pick_python311() {
    local c
    for c in "${CVS_TUI_PYTHON:-}" python3.11 python3.12 python3.13 python3; do
        [[ -n $c ]] || continue
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$c"
            return 0
        fi
    done
    echo "cvs-tui: error: no Python >= 3.11 found; install one or set CVS_TUI_PYTHON" >&2
    return 1
}

# Options only when run directly: when sourced, "$@" are the caller's arguments (demo.sh passes
# them on to cvs-tui).
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    for _cvs_arg in "$@"; do
        case $_cvs_arg in
        -v | --verbose) export CVS_TUI_SETUP_VERBOSE=1 ;;
        -h | --help)
            sed -n '2,9s/^# \{0,1\}//p' "$0"
            exit 0
            ;;
        *)
            echo "bootstrap.sh: error: unknown option '$_cvs_arg' (use -v for installer output)" >&2
            exit 2
            ;;
        esac
    done
fi
_cvs_bootstrap
unset -f _cvs_bootstrap _cvs_pick_python311
