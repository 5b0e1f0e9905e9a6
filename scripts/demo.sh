#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the suite with real MaxText on the local CPU.
# In a terminal it shows the live view; without one it runs headless. Extra arguments go to cvs-tui.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/bootstrap.sh
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
exec .venv/bin/cvs-tui configs/local/cpu_jaxmaxtext_tiny-llama_single.json "$@"
