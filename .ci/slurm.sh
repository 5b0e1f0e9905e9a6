#!/usr/bin/env bash
# A real two-node Slurm cluster on this one Debian 12 machine, for the Slurm tests (root, no systemd).
#
#   slurm.sh up    install slurmctld/slurmd/slurm-client/munge (Debian packages) if missing; start munged,
#                  slurmctld and two slurmd (`-N node1`, `-N node2`) inside a private network namespace;
#                  wait until both nodes are idle; write $CVS_SLURM_ROOT/env. Safe to run twice: a
#                  cluster that is already up is reused, a half-up one is stopped and started afresh.
#   slurm.sh down  cancel every job of this cluster, stop exactly the daemons `up` started (by the PIDs
#                  they recorded), delete the namespace and the state.
#
# Why a network namespace: Slurm's ports (16817-16819) and MaxText's fixed CPU coordinator port (1234)
# stay out of the root namespace where other tests run. Clients must run inside it too:
# `$CVS_SLURM_PREFIX srun ...` (nsenter, not `ip netns exec`, which remounts /sys and breaks slurmd).
set -euo pipefail

R=${CVS_SLURM_ROOT:-/tmp/cvs-slurm}
R=$(realpath -m "$R")
# One namespace per root, so two roots (two CI runs) on one machine do not clash.
NSNAME=cvsslurm-$(printf '%s' "$R" | md5sum | cut -c1-8)
NS="nsenter --net=/run/netns/$NSNAME"
CONF=$R/etc/slurm.conf

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pidfiles() { echo "$R/run/slurmd-node1.pid $R/run/slurmd-node2.pid $R/run/slurmctld.pid $R/munge/munged.pid"; }

all_up() {
  local f
  for f in $(pidfiles); do alive "$f" || return 1; done
  [ -e "/run/netns/$NSNAME" ] && [ -s "$R/env" ] && SLURM_CONF=$CONF $NS sinfo -h >/dev/null 2>&1
}

install_packages() { # socat: the Docker-on-Slurm bridge's first choice (tests/runner/test_slurm_docker.py)
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null &&
    command -v munged >/dev/null && command -v socat >/dev/null && return 0
  # policy-rc.d keeps the packages' postinst from starting system-wide daemons.
  local made=""
  [ -e /usr/sbin/policy-rc.d ] || {
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made=1
  }
  # DPkg::Lock::Timeout: wait for another apt/dpkg on the machine instead of failing
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends slurmctld slurmd slurm-client munge socat >/dev/null
  [ -z "$made" ] || rm -f /usr/sbin/policy-rc.d
}

write_conf() {
  local cpus
  cpus=$(nproc)
  cat >"$CONF" <<EOF
ClusterName=cvsci
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$R/munge/munge.sock
StateSaveLocation=$R/state
SlurmdSpoolDir=$R/spool/%n
SlurmctldPidFile=$R/run/slurmctld.pid
SlurmdPidFile=$R/run/slurmd-%n.pid
SlurmctldLogFile=$R/log/slurmctld.log
SlurmdLogFile=$R/log/slurmd-%n.log
# Two slurmd on one kernel: cgroup plugins would collide, so track processes by parentage.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=5
MinJobAge=30
# Per-node ports: with one hostname both slurmd would otherwise bind the same port.
NodeName=node1 NodeAddr=127.0.0.11 NodeHostname=node1 Port=16818 CPUs=$cpus RealMemory=2000 State=UNKNOWN
NodeName=node2 NodeAddr=127.0.0.12 NodeHostname=node2 Port=16819 CPUs=$cpus RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

up() {
  mkdir -p "$R"
  if all_up; then
    echo "slurm up (reused): $(SLURM_CONF=$CONF $NS sinfo -h -o '%P %T %D %N')"
    return 0
  fi
  down >/dev/null # a half-up cluster: start afresh
  install_packages
  mkdir -p "$R"/{etc,run,log,state,spool/node1,spool/node2,munge}
  chown munge:munge "$R/munge"
  chmod 755 "$R/munge" # munged: the socket folder must be a+x, not a+w
  install -o munge -g munge -m 400 /etc/munge/munge.key "$R/munge/munge.key"
  runuser -u munge -- munged --socket="$R/munge/munge.sock" --key-file="$R/munge/munge.key" \
    --log-file="$R/munge/munged.log" --pid-file="$R/munge/munged.pid" --seed-file="$R/munge/munged.seed"
  write_conf
  [ -e "/run/netns/$NSNAME" ] || ip netns add "$NSNAME"
  ip -n "$NSNAME" link set lo up
  # With 127.0.0.1 alone on lo, getaddrinfo(AI_ADDRCONFIG) finds no IPv4: add the nodes' addresses.
  ip -n "$NSNAME" addr replace 127.0.0.11/8 dev lo
  ip -n "$NSNAME" addr replace 127.0.0.12/8 dev lo
  export SLURM_CONF=$CONF
  $NS slurmctld -f "$CONF"
  $NS slurmd -f "$CONF" -N node1
  $NS slurmd -f "$CONF" -N node2
  local ok=""
  for _ in $(seq 150); do
    [ "$($NS sinfo -h -o '%T %D' 2>/dev/null)" = "idle 2" ] && ok=1 && break
    sleep 0.2
  done
  [ -n "$ok" ] || {
    echo "slurm: nodes not idle after 30 s; see $R/log" >&2
    $NS sinfo >&2 || true
    return 1
  }
  cat >"$R/env.tmp" <<EOF
export CVS_SLURM_ROOT=$R
export SLURM_CONF=$CONF
export CVS_SLURM_NETNS=$NSNAME
export CVS_SLURM_PREFIX="$NS"
export CVS_SLURM_NODES="node1 node2"
export CVS_SLURM_PARTITION=debug
EOF
  mv -f "$R/env.tmp" "$R/env"
  echo "slurm up: $($NS sinfo -h -o '%P %T %D %N') (env: $R/env; clients: SLURM_CONF=$CONF $NS srun ...)"
}

down() {
  set +e
  rm -f "$R/env"
  if [ -e "/run/netns/$NSNAME" ] && [ -f "$CONF" ] && alive "$R/run/slurmctld.pid"; then
    local jobs
    jobs=$(SLURM_CONF=$CONF $NS squeue -h -o %i 2>/dev/null)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      SLURM_CONF=$CONF $NS scancel $jobs 2>/dev/null
      for _ in $(seq 100); do
        [ -z "$(SLURM_CONF=$CONF $NS squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.1
      done
    fi
  fi
  for f in $(pidfiles); do stop_pidfile "$f" 10; done
  [ -e "/run/netns/$NSNAME" ] && ip netns del "$NSNAME"
  rm -rf "$R/state" "$R/spool" "$R/run"
  echo "slurm down"
}

case "${1:-}" in
up) up ;;
down) down ;;
*)
  echo "usage: $0 up|down" >&2
  exit 2
  ;;
esac
