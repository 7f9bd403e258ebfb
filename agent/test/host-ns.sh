#!/bin/bash
# One simulated Proxmox host for the agent's tests, run as `unshare -m --propagation private bash host-ns.sh DIR`.
# In its own mount namespace: /etc, /usr/local and /var are overlays whose changes live in a tmpfs
# (the account, the sudoers entry, the agent's files, its config and audit file never reach the
# machine), /dev is a private tmpfs with the basic nodes and one GPU stand-in /dev/nvidia0. Then the
# REAL install script installs the agent, a process holding /dev/nvidia0 starts, and sshd runs with
# DIR/sshd_config (stock: no ForceCommand, forwarding at its defaults) in the foreground.
# DIR holds: env (AGENT GRAMMAR USER), worker_ssh.pub, bot.pub.pem, worker.pub.pem, bin/, sshd_config.
set -euo pipefail
W=$1
# shellcheck disable=SC1091
. "$W/env"
mkdir -p "$W/ns"
mount -t tmpfs -o mode=755 gpu-medic-agent-test "$W/ns"
for d in etc usr/local var; do
  n=${d//\//_}
  mkdir -p "$W/ns/$n.up" "$W/ns/$n.work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$W/ns/$n.up,workdir=$W/ns/$n.work" "/$d"
done
mkdir -p "$W/ns/hostdev"
mount --rbind /dev "$W/ns/hostdev"
mount -t tmpfs -o mode=755,size=1m gpu-medic-agent-dev /dev
for n in null zero full random urandom tty ptmx; do
  touch "/dev/$n"
  mount --bind "$W/ns/hostdev/$n" "/dev/$n"
done
mkdir -p /dev/pts /dev/shm
mount --rbind "$W/ns/hostdev/pts" /dev/pts
mount --rbind "$W/ns/hostdev/shm" /dev/shm
umount -R "$W/ns/hostdev" 2>/dev/null || umount -l "$W/ns/hostdev"
: >/dev/nvidia0

sh "$AGENT/install.sh" install --user "$USER_NAME" --key "$W/worker_ssh.pub" --bot-key "$W/bot.pub.pem" \
  --worker-key "$W/worker.pub.pem" --path "$W/bin:/usr/sbin:/usr/bin:/sbin:/bin" --grammar "$GRAMMAR" \
  --machine kpro5 >"$W/install.log" 2>&1
# This host's own run dir for the agent's run slots (simulated hosts on one machine must not share one).
sed -i "s|^run_dir=.*|run_dir=$W/run|" /etc/gpu-medic/agent.conf

# A GPU holder to signal: sleep with /dev/nvidia0 open (fd 3), in this namespace.
setsid sh -c 'exec 3</dev/nvidia0; exec sleep 600' </dev/null >/dev/null 2>&1 &
echo $! >"$W/holder.pid"
mkdir -p /run/sshd
exec /usr/sbin/sshd -D -e -f "$W/sshd_config"
