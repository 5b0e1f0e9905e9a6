#!/usr/bin/env bash
# Creates the tool's environment (.venv, Python >= 3.11) and the MaxText workload environment
# (.venv-maxtext, Python >= 3.12). Idempotent: a second run only checks. Sourced by demo.sh and test.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

pick_python311() {
  for c in "${CVS_TUI_PYTHON:-}" python3.11 python3.12 python3.13 python3; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  echo "cvs-tui: error: no Python >= 3.11 found; install one or set CVS_TUI_PYTHON" >&2
  return 1
}

stamp=.venv/.cvs-tui-installed
want=$(cat pyproject.toml setup.py cvs_tui/core/parse/_native.c | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/cvs-tui ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  PY=$(pick_python311)
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  # an earlier install's emptied package folder would shadow the editable install
  find .venv/lib/python3*/site-packages/cvs_tui -depth -type d -empty -delete 2>/dev/null || true
  echo "$want" >"$stamp"
fi

bash scripts/setup-maxtext.sh .venv-maxtext >/dev/null
export CVS_TUI_MAXTEXT_PYTHON="$ROOT/.venv-maxtext/bin/python"
