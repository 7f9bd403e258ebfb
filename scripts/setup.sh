#!/usr/bin/env bash
# Makes a fresh Debian/Ubuntu machine ready to run gpu-medic's demo and tests from this checkout:
# installs what is missing (Node.js 20+ from the distribution or NodeSource, openssh-server, psmisc, gcc, util-linux, redis-server,
# lxc and busybox-static for the test fleet's containers, root's /etc/subuid and /etc/subgid range;
# with --ci also docker-compose, to validate docker-compose.yml), starts a local Redis on
# 127.0.0.1:6379 if none answers, then `npm install`. Safe to run again: it only adds what is
# missing. Needs root (or sudo) only when something must be installed or Redis started.
#
#   bash scripts/setup.sh          # then: npm run demo   (README, "Two commands")
#   bash scripts/setup.sh --ci     # what .ci/run uses before `npm test`
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

ci=0
for a in "$@"; do
  case "$a" in
    --ci) ci=1 ;;
    *) echo "usage: bash scripts/setup.sh [--ci]" >&2; exit 2 ;;
  esac
done

say() { echo "setup: $*"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else say "this step needs root and there is no sudo: run as root: $*" >&2; exit 1
  fi
}

node_ok() { command -v node >/dev/null && [ "$(node -p 'Number(process.versions.node.split(".")[0])' 2>/dev/null || echo 0)" -ge 20 ]; }

# Node.js 20+: the distribution's package when it is new enough (Debian 13, Ubuntu 24.04), else
# NodeSource's apt repository for 20.x (Debian 12's own nodejs is 18).
if ! node_ok; then
  command -v apt-get >/dev/null || { say "Node.js 20+ is missing and there is no apt-get here: install it by hand" >&2; exit 1; }
  as_root apt-get update -qq
  candidate=$(apt-cache policy nodejs 2>/dev/null | sed -n 's/^ *Candidate: *\([0-9]*\).*/\1/p')
  if [ "${candidate:-0}" -ge 20 ] 2>/dev/null; then
    say "installing nodejs ${candidate} and npm from the distribution"
    as_root apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  else
    say "the distribution's nodejs is ${candidate:-absent}: adding NodeSource's repository for Node.js 20.x"
    as_root apt-get install -y -qq --no-install-recommends ca-certificates curl gnupg >/dev/null
    as_root install -d -m 0755 /etc/apt/keyrings
    curl -fsSL https://deb.nodesource.com/gpgkey/nodesource-repo.gpg.key | as_root gpg --dearmor --yes -o /etc/apt/keyrings/nodesource.gpg
    echo "deb [signed-by=/etc/apt/keyrings/nodesource.gpg] https://deb.nodesource.com/node_20.x nodistro main" | as_root tee /etc/apt/sources.list.d/nodesource.list >/dev/null
    as_root apt-get update -qq
    as_root apt-get install -y -qq --no-install-recommends nodejs >/dev/null
  fi
  hash -r
fi

need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v fuser >/dev/null || need+=(psmisc)
command -v sudo >/dev/null || need+=(sudo) # agent/test installs the host agent as on Proxmox: with sudo
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v nsenter >/dev/null || need+=(util-linux)
command -v redis-server >/dev/null || need+=(redis-server)
# The test fleet's containers are real LXC (test/harness/fleet/lxc-container.ts): Debian's lxc and a static busybox for their rootfs.
command -v lxc-start >/dev/null || need+=(lxc)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
if [ "$ci" -eq 1 ]; then command -v docker-compose >/dev/null || need+=(docker-compose); fi
# agent/test/static-checks.test.ts runs shellcheck over every shell text the agent ships (it fails without it under CI=true).
if [ "$ci" -eq 1 ]; then command -v shellcheck >/dev/null || need+=(shellcheck); fi
# The Alertmanager receiver's end-to-end test runs the real Prometheus and Alertmanager (and their
# promtool and amtool check the docs' rules and config).
if [ "$ci" -eq 1 ]; then command -v promtool >/dev/null || need+=(prometheus); fi
if [ "$ci" -eq 1 ]; then command -v amtool >/dev/null || need+=(prometheus-alertmanager); fi
if [ "${#need[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null || { say "missing ${need[*]} and no apt-get here: install them by hand" >&2; exit 1; }
  say "installing ${need[*]}"
  as_root apt-get update -qq
  # prometheus and prometheus-alertmanager start their daemons (on :9090, :9093) from postinst:
  # forbid starting any service while installing, unless a policy-rc.d is already there.
  policy_made=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
    as_root chmod +x /usr/sbin/policy-rc.d
    policy_made=1
  fi
  as_root apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  if [ "$policy_made" -eq 1 ]; then as_root rm -f /usr/sbin/policy-rc.d; fi
fi
# Root's subordinate ids as on Proxmox (unprivileged containers map their root to host uid 100000).
for f in /etc/subuid /etc/subgid; do
  if ! grep -q '^root:' "$f" 2>/dev/null; then
    say "adding root:100000:65536 to $f"
    echo 'root:100000:65536' | as_root tee -a "$f" >/dev/null
  fi
done
if ! node_ok; then
  say "Node.js 20 or newer is needed and could not be installed (now: $(node --version 2>/dev/null || echo none))." >&2
  say "Install Node.js 20.x by hand (https://github.com/nodesource/distributions), then run this again." >&2
  exit 1
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
  say "starting redis on 127.0.0.1:6379"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/gpu-medic-setup.log
  for _ in $(seq 1 50); do redis-cli ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
fi
redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG || { say "redis on 127.0.0.1:6379 does not answer" >&2; exit 1; }

# npm install, not npm ci: the lockfile cannot list vite's optional Windows-only package (the
# registry does not serve it) and npm ci refuses that; npm install follows the lock all the same.
# `npm ls` only reads: it fails when a dependency of package.json is missing or does not match.
if ! npm ls --depth=0 >/dev/null 2>&1; then
  say "npm install"
  npm install --no-audit --no-fund
fi
[ "$(id -u)" -eq 0 ] || say "note: npm run demo and npm test need root (the simulated containers are PID and mount namespaces)"
say "ready: npm run demo (the simulated fleet, bot, worker and a local Slack page), npm test (the suite)"
