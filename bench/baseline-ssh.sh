#!/usr/bin/env bash
# What on-call does by hand: one OpenSSH `ssh` per query, one after the other, each a new
# connection (no ControlMaster), host key checked against the pinned known_hosts file.
#   baseline-ssh.sh <private key> <known_hosts> <port> <remote command>...
# The key is the engineer's own for root (the bench fleet's operatorLogin), not the worker's: on an
# agent host root refuses the worker's key, and the baseline is what on-call types by hand.
# The remote commands are passed in by bench/run.ts, built from the same templates the worker
# runs (src/agent-grammar/templates/snapshot-commands.ts), so both sides ask the machine exactly the same things.
set -euo pipefail
key=$1 known=$2 port=$3
shift 3
for cmd in "$@"; do
  ssh -F /dev/null -i "$key" -o IdentitiesOnly=yes -o BatchMode=yes \
    -o UserKnownHostsFile="$known" -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes \
    -o ControlMaster=no -o ControlPath=none -o LogLevel=ERROR \
    -p "$port" root@127.0.0.1 "$cmd" >/dev/null
done
