#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the suite with real MaxText on the local CPU.
# In a terminal it shows the live view; without one it runs headless. Extra arguments go to cvs-tui.
# CVS_TUI_SETUP_VERBOSE=1 shows the installers' output during set-up.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/bootstrap.sh
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
rc=0
.venv/bin/cvs-tui configs/local/cpu_jaxmaxtext_tiny-llama_single.json "$@" || rc=$?
# The demo config reads {env.CVS_TUI_MAXTEXT_PYTHON}; the variable was set for this script only.
printf '\nTo use the demo config from your own shell (config validate, plan, analyze, card, a rerun):\n' >&2
printf '  export CVS_TUI_MAXTEXT_PYTHON=%q\n' "$CVS_TUI_MAXTEXT_PYTHON" >&2
exit "$rc"
