#!/usr/bin/env bash
# Real test infrastructure for cvs-tui on a root Debian 12 machine (no systemd, cgroup v1).
#
#   infra.sh up    install docker.io, busybox-static, openssh-server; start dockerd on a private socket,
#                  import a busybox image, start one OpenSSH sshd per emulated node on a loopback
#                  address (127.0.0.2:2222, 127.0.0.3:2222, ...) for the plain user `cvsnode`; write
#                  $CVS_TEST_ROOT/env. A second node user `cvsnode2` (same key) for tests that log nodes in
#                  as different users. Safe to run twice: whatever is already up is reused.
#                  Also a local image registry (Debian's docker-registry, distribution 2.8) on
#                  127.0.0.9:5000, for tests that pull a missing image during a run.
#   infra.sh down  stop exactly what `up` started (by the PIDs it recorded), unmount and remove its state.
#
# Nothing here touches host networking: dockerd runs with --bridge=none and without iptables or
# ip_forward changes; the nodes are loopback addresses (the whole 127/8 is on `lo`), no namespaces.
set -euo pipefail

R=${CVS_TEST_ROOT:-/tmp/cvs-ci}
NODE_COUNT=${CVS_TEST_NODE_COUNT:-2}
PORT=${CVS_TEST_SSH_PORT:-2222}
TUSER=cvsnode
# A second node user (same key, same docker group): the node-health tests log one node in as each, so
# kernel-log access (a sudoers rule) can differ per node although both nodes share this kernel.
TUSER2=cvsnode2
IMAGE=cvs-test/busybox:latest
SOCK=$R/docker.sock
REGISTRY_ADDR=${CVS_TEST_REGISTRY_ADDR:-127.0.0.9:5000}

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

node_addr() { echo "127.0.0.$(($1 + 1))"; } # node 1 -> 127.0.0.2

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  [ -x /bin/busybox ] || missing+=(busybox-static)
  [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
  command -v ss >/dev/null || missing+=(iproute2)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  # sudo: the node-health tests let the node user read /dev/kmsg with `sudo -n` (they add and remove
  # their own sudoers rule, tests/health/_health_kmsg.py)
  command -v sudo >/dev/null || missing+=(sudo)
  # setfacl: a run folder both node users write (tests/health/test_health_live.py, one node per user)
  command -v setfacl >/dev/null || missing+=(acl)
  [ ${#missing[@]} -eq 0 ] && return 0
  # Without policy-rc.d, installing docker.io would start a default dockerd that rewrites iptables.
  [ -e /usr/sbin/policy-rc.d ] || {
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    touch "$R/created-policy-rc.d"
  }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start_dockerd() {
  if alive "$R/dockerd.pid"; then return 0; fi
  mkdir -p "$R/docker-data" "$R/docker-exec"
  dockerd -H "unix://$SOCK" --data-root "$R/docker-data" --exec-root "$R/docker-exec" \
    --pidfile "$R/dockerd.pid" --iptables=false --ip6tables=false --ip-forward=false \
    --bridge=none --storage-driver=overlay2 >"$R/dockerd.log" 2>&1 &
  wait_for 30 docker -H "unix://$SOCK" version
}

import_image() {
  docker -H "unix://$SOCK" image inspect "$IMAGE" >/dev/null 2>&1 && return 0
  local bb="$R/bbroot"
  rm -rf "$bb"
  mkdir -p "$bb"/{bin,tmp,proc,sys,dev,etc,data}
  cp /bin/busybox "$bb/bin/busybox"
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$bb/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$bb/etc/passwd"
  printf 'root:x:0:\nvideo:x:44:\n' >"$bb/etc/group"
  chmod 1777 "$bb/tmp"
  tar -C "$bb" -c . | docker -H "unix://$SOCK" import -c 'CMD ["/bin/sh"]' -c 'ENV PATH=/bin' - "$IMAGE" >/dev/null
  rm -rf "$bb"
}

start_registry() {
  alive "$R/registry.pid" && return 0
  mkdir -p "$R/registry-data"
  cat >"$R/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $R/registry-data
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
EOF
  docker-registry serve "$R/registry.yml" >"$R/registry.log" 2>&1 &
  echo $! >"$R/registry.pid"
  wait_for 10 bash -c "echo >/dev/tcp/${REGISTRY_ADDR%:*}/${REGISTRY_ADDR#*:}"
}

setup_user_and_keys() {
  mkdir -p "$R/ssh" "$R/home"
  chmod 755 "$R" "$R/ssh"
  [ -f "$R/ssh/host_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$R/ssh/host_key" -C cvs-test-host
  [ -f "$R/ssh/client_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$R/ssh/client_key" -C cvs-test-client
  cp "$R/ssh/client_key.pub" "$R/ssh/authorized_keys"
  chmod 644 "$R/ssh/authorized_keys"
  getent group docker >/dev/null || groupadd docker
  if ! id "$TUSER" >/dev/null 2>&1; then
    useradd -M -d "$R/home" -s /bin/bash -G docker "$TUSER"
    touch "$R/created-user"
  fi
  # '*' = no password but not locked (sshd refuses locked accounts even for key auth)
  usermod -p '*' -d "$R/home" -a -G docker "$TUSER"
  chown "$TUSER:" "$R/home"
  mkdir -p "$R/home2"
  if ! id "$TUSER2" >/dev/null 2>&1; then
    useradd -M -d "$R/home2" -s /bin/bash -G docker "$TUSER2"
    touch "$R/created-user2"
  fi
  usermod -p '*' -d "$R/home2" -a -G docker "$TUSER2"
  chown "$TUSER2:" "$R/home2"
  mkdir -p /run/sshd && chmod 755 /run/sshd # privilege-separation dir, compiled-in path
  # A wrong key for the same hosts, for tests of host-key rejection.
  [ -f "$R/ssh/wrong_host_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$R/ssh/wrong_host_key" -C cvs-wrong
}

start_sshd() { # start_sshd <i>
  local i=$1 addr
  addr=$(node_addr "$i")
  alive "$R/ssh/sshd.$i.pid" && return 0
  cat >"$R/ssh/sshd_config.$i" <<EOF
ListenAddress $addr:$PORT
HostKey $R/ssh/host_key
PidFile $R/ssh/sshd.$i.pid
AuthorizedKeysFile $R/ssh/authorized_keys
StrictModes no
PermitRootLogin no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
StreamLocalBindUnlink yes
MaxSessions 100
MaxStartups 200:30:400
ClientAliveInterval 0
SetEnv DOCKER_HOST=unix://$SOCK
Subsystem sftp internal-sftp
EOF
  /usr/sbin/sshd -D -e -f "$R/ssh/sshd_config.$i" >"$R/ssh/sshd.$i.log" 2>&1 &
  wait_for 10 bash -c "echo >/dev/tcp/$addr/$PORT"
}

up() {
  mkdir -p "$R"
  install_packages
  start_dockerd
  import_image
  start_registry
  setup_user_and_keys
  local hosts="" known="" wrong=""
  for i in $(seq 1 "$NODE_COUNT"); do
    start_sshd "$i"
    local a
    a=$(node_addr "$i")
    hosts="$hosts $a"
    known="$known[$a]:$PORT $(cut -d' ' -f1,2 "$R/ssh/host_key.pub")"$'\n'
    wrong="$wrong[$a]:$PORT $(cut -d' ' -f1,2 "$R/ssh/wrong_host_key.pub")"$'\n'
  done
  printf '%s' "$known" >"$R/ssh/known_hosts"
  printf '%s' "$wrong" >"$R/ssh/known_hosts.wrong"
  chmod 644 "$R/ssh/known_hosts" "$R/ssh/known_hosts.wrong"
  # The client key is read by the test process (root) only; keep it private.
  chmod 600 "$R/ssh/client_key"
  hosts=${hosts# }
  cat >"$R/env.tmp" <<EOF
export CVS_TEST_ROOT=$R
export DOCKER_HOST=unix://$SOCK
export CVS_TEST_IMAGE=$IMAGE
export CVS_TEST_SSH_USER=$TUSER
export CVS_TEST_USER2=$TUSER2
export CVS_TEST_SSH_KEY=$R/ssh/client_key
export CVS_TEST_SSH_KNOWN_HOSTS=$R/ssh/known_hosts
export CVS_TEST_SSH_WRONG_KNOWN_HOSTS=$R/ssh/known_hosts.wrong
export CVS_TEST_SSH_PORT=$PORT
export CVS_TEST_NODES="$hosts"
export CVS_TEST_REMOTE_DOCKER_SOCK=$SOCK
export CVS_TEST_NODE_SCRATCH=$R/home
export CVS_TEST_REGISTRY=$REGISTRY_ADDR
EOF
  mv -f "$R/env.tmp" "$R/env"
  echo "infra up: nodes $hosts port $PORT, docker $SOCK, image $IMAGE (env: $R/env)"
}

down() {
  set +e
  [ -d "$R" ] || {
    echo "infra down: nothing at $R"
    return 0
  }
  for f in "$R"/ssh/sshd.*.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
  stop_pidfile "$R/registry.pid"
  # containers die with dockerd (no live-restore); it also stops its own containerd
  stop_pidfile "$R/dockerd.pid"
  mount | awk -v r="$R/" 'index($3, r) == 1 {print $3}' | sort -r | xargs -r -n1 umount -l
  if [ -e "$R/created-user" ]; then
    userdel "$TUSER" 2>/dev/null
    rm -f "$R/created-user"
  fi
  if [ -e "$R/created-user2" ]; then
    userdel "$TUSER2" 2>/dev/null
    rm -f "$R/created-user2"
  fi
  if [ -e "$R/created-policy-rc.d" ]; then
    rm -f /usr/sbin/policy-rc.d "$R/created-policy-rc.d"
  fi
  rm -rf "$R/docker-data" "$R/docker-exec" "$R/bbroot" "$SOCK" "$R/ssh" "$R/home" "$R/home2" "$R/env" "$R/dockerd.log" \
    "$R/registry-data" "$R/registry.yml" "$R/registry.log"
  rmdir "$R" 2>/dev/null
  echo "infra down"
}

case "${1:-}" in
up) up ;;
down) down ;;
*)
  echo "usage: $0 up|down" >&2
  exit 2
  ;;
esac
