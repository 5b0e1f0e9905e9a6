#!/usr/bin/env bash
# Sets everything up on a fresh machine (as root: packages, dockerd, sshd test nodes, chromium) and runs
# the whole test suite, the slow real-infrastructure and real-MaxText tests included.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CVS_TEST_ROOT=${CVS_TEST_ROOT:-/tmp/cvs-ci}

if [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium tmux gcc libc6-dev make >/dev/null
  bash .ci/infra.sh up
  bash .ci/prometheus.sh  # the server and promtool the metrics-export tests start and run
  # the real two-node Slurm cluster (tests/runner/test_slurm_*.py); both `up` and `down` are idempotent
  trap 'bash .ci/slurm.sh down || true; bash .ci/infra.sh down' EXIT
  bash .ci/slurm.sh up
else
  echo "not root: skipping system packages and test nodes (tests that need them are skipped)" >&2
fi

# shellcheck source=scripts/bootstrap.sh
source scripts/bootstrap.sh
# the tiers of the Makefile: the static one first (no root, no services), then every test in one run
make -s lint
# the slowest tests, named in every CI log: where the 30-minute budget goes
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=30 "$@"
