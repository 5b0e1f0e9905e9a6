#!/usr/bin/env bash
# Prometheus for the metrics-export tests (tests/report/test_metrics_prometheus.py, tests/report/test_metrics_deploy.py):
# installs Debian's `prometheus` package (the server and promtool) on a root Debian 12 machine without
# systemd. Nothing is started here and the package's own service is kept from starting (policy-rc.d):
# each test starts its own server bound to 127.0.0.1 with a temp data folder and a short scrape interval,
# and stops it by its PID. Safe to run twice.
set -euo pipefail

command -v prometheus >/dev/null && command -v promtool >/dev/null && exit 0
made=""
[ -e /usr/sbin/policy-rc.d ] || {
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  made=1
}
# DPkg::Lock::Timeout: wait for another apt/dpkg on the machine instead of failing
apt-get -o DPkg::Lock::Timeout=600 update -qq
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
  --no-install-recommends prometheus >/dev/null
[ -z "$made" ] || rm -f /usr/sbin/policy-rc.d
command -v prometheus >/dev/null && command -v promtool >/dev/null
