# Shared shell helpers for .ci/infra.sh and .ci/slurm.sh (sourced, not run).

wait_for() { # wait_for <seconds> <cmd...>: poll every 0.1 s until the command succeeds
  local n=$(($1 * 10))
  shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "${0##*/}: timeout waiting for: $*" >&2
  return 1
}

alive() { # alive <pidfile>: the recorded process exists and is not a zombie
  local p st
  [ -s "$1" ] || return 1
  p=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$p" ] || return 1
  st=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

stop_pidfile() { # stop_pidfile <file> [seconds]: TERM, wait (default 20 s), then KILL; removes the file
  local f=$1 n=$((${2:-20} * 10)) p
  [ -f "$f" ] || return 0
  p=$(cat "$f" 2>/dev/null)
  if alive "$f"; then
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq "$n"); do alive "$f" || break; sleep 0.1; done
    alive "$f" && kill -KILL "$p" 2>/dev/null
  fi
  rm -f "$f"
}
