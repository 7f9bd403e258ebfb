#!/usr/bin/env bash
# S2 by hand, the same SSH steps as `/gpu unstick` in sequence, one `ssh` per step:
#   snapshot (the status queries), kill -s TERM <pids>, wait the grace, kill -s KILL <pids>
#   (survivors), poll the GPU query until no GPU holds more than <free MiB>, snapshot again.
#   baseline-unstick.sh <key> <known_hosts> <port> <grace s> <free MiB> <pids> <gpu query> <snapshot cmd>...
# <pids> is a space-separated list of container PIDs (given, not parsed from fuser: that only
# helps the baseline). The poll runs back to back, faster than a person would. <key> is the
# engineer's own for the container's root (the bench fleet's operatorLogin): the worker's runs only its agent.
set -euo pipefail
key=$1 known=$2 port=$3 grace=$4 freemib=$5 pids=$6 gpuq=$7
shift 7
s() {
  ssh -F /dev/null -i "$key" -o IdentitiesOnly=yes -o BatchMode=yes \
    -o UserKnownHostsFile="$known" -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes \
    -o ControlMaster=no -o ControlPath=none -o LogLevel=ERROR \
    -p "$port" root@127.0.0.1 "$1"
}
for cmd in "$@"; do s "$cmd" >/dev/null; done
s "kill -s TERM $pids" >/dev/null 2>&1 || true
sleep "$grace"
s "kill -s KILL $pids" >/dev/null 2>&1 || true
for _ in $(seq 1 600); do
  busy=$(s "$gpuq" | awk -F', *' -v m="$freemib" '$5 + 0 > m { n++ } END { print n + 0 }')
  [ "$busy" = 0 ] && break
done
for cmd in "$@"; do s "$cmd" >/dev/null; done
