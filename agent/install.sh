#!/bin/sh
# Installs, upgrades, removes or shows gpu-medic-agent on one host (docs/agent.md, AGENT-PROTOCOL.md).
#
#   sh install.sh install --key worker.pub [--from CIDRS] [--user gpu-medic] [--bot-key bot.pub.pem]
#                         [--worker-key worker.pub.pem] [--path DIRS] [--role host|self] [--root-forced] [--grammar FILE]
#                         [--no-sudo]   (with --role self: the account runs the agent itself, not as root)
#   sh install.sh upgrade   [--user gpu-medic] [--grammar FILE]
#   sh install.sh uninstall [--user gpu-medic] [--root-forced]
#   sh install.sh status    [--user gpu-medic]
#   any of them with --prefix DIR (tests): every file under DIR instead of /, the account itself real
#   (its home DIR/var/lib/<user>, so sshd's default AuthorizedKeysFile finds the forced key there).
#
# Run as root. Safe to run again: install rewrites what it owns and keeps an existing agent.conf.
set -eu
umask 022
export LC_ALL=C
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

here=$(cd "$(dirname "$0")" && pwd)
say() { echo "gpu-medic-agent install: $*"; }
die() { echo "gpu-medic-agent install: error: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: sh install.sh install|upgrade|uninstall|status [options] (see the top of this file)"
action=$1
shift
key='' from='' user=gpu-medic bot_key='' worker_key='' root_forced=0 prefix='' path_dirs='' role=host no_sudo=0 grammar="$here/grammar.json"
while [ $# -gt 0 ]; do
  case $1 in
    --key) key=${2:?--key needs a file}; shift 2 ;;
    --from) from=${2:?--from needs a list}; shift 2 ;;
    --user) user=${2:?--user needs a name}; shift 2 ;;
    --bot-key) bot_key=${2:?--bot-key needs a file}; shift 2 ;;
    --worker-key) worker_key=${2:?--worker-key needs a file}; shift 2 ;;
    --path) path_dirs=${2:?--path needs dirs}; shift 2 ;;
    --role) role=${2:?--role needs host or self}; shift 2 ;;
    --grammar) grammar=${2:?--grammar needs a file}; shift 2 ;;
    --prefix) prefix=${2:?--prefix needs a dir}; shift 2 ;;
    --root-forced) root_forced=1; shift ;;
    --no-sudo) no_sudo=1; shift ;;
    *) die "unknown option $1" ;;
  esac
done
case $action in install | upgrade | uninstall | status) ;; *) die "unknown action $action (install, upgrade, uninstall, status)" ;; esac
[ "$(id -u)" = 0 ] || die "run as root"
case $user in [a-z_]*[a-z0-9_-] | [a-z_]) ;; *) die "--user: not an account name: $user" ;; esac
case $user in *[!a-z0-9_-]*) die "--user: not an account name: $user" ;; esac
case $from in *[!0-9A-Fa-f.:/,*!?]*) die "--from: only addresses, CIDRs and patterns separated by commas: $from" ;; esac
case $path_dirs in *[!A-Za-z0-9/_.:+-]*) die "--path: only absolute dirs separated by colons: $path_dirs" ;; esac
case $role in host | self) ;; *) die "--role: host (a Proxmox host) or self (a container reached at its own address), not $role" ;; esac
[ "$no_sudo" = 0 ] || [ "$role" = self ] || die "--no-sudo is for a container reached at its own address (--role self): a host's agent must run as root"
[ "$no_sudo" = 0 ] || [ "$root_forced" = 0 ] || die "--no-sudo and --root-forced exclude each other"
if [ -n "$prefix" ]; then
  case $prefix in /*) ;; *) die "--prefix must be absolute" ;; esac
  prefix=${prefix%/}
fi

# Where everything goes (under --prefix in tests).
libdir=/usr/local/lib/gpu-medic
etcdir=/etc/gpu-medic
logdir=/var/log/gpu-medic
home=/var/lib/$user
front=$prefix$libdir/gpu-medic-agent
core=$prefix$libdir/gpu-medic-agent.pl
conf=$prefix$etcdir/agent.conf
sudoers=$prefix/etc/sudoers.d/$user
akdir=$prefix$home/.ssh
ak=$akdir/authorized_keys
rootak=$prefix/root/.ssh/authorized_keys
audit_file=$prefix$logdir/agent-audit.log
key_comment=gpu-medic-worker

install_agent_files() {
  [ -r "$here/gpu-medic-agent" ] && [ -r "$here/gpu-medic-agent.pl" ] || die "gpu-medic-agent and gpu-medic-agent.pl must sit beside install.sh"
  [ -r "$grammar" ] || die "no grammar file at $grammar"
  perl -MJSON::PP -e 'local $/; my $g = JSON::PP->new->decode(<STDIN>); exit(($g->{protocol} // 0) == 1 ? 0 : 1)' <"$grammar" ||
    die "$grammar is not a protocol 1 grammar"
  perl -c "$here/gpu-medic-agent.pl" >/dev/null 2>&1 || die "gpu-medic-agent.pl does not compile with this perl ($(perl -e 'print $^V'))"
  install -d -o root -g root -m 0755 "$prefix$libdir"
  tmp=$(mktemp "$prefix$libdir/.front.XXXXXX")
  # The front's two constants: where the core and its config are (root-owned, so the caller cannot change them).
  # An upgrade keeps how the front runs the core (GPU_MEDIC_SUDO=0 after install --no-sudo).
  sudo_word=1
  if [ "$no_sudo" = 1 ] || { [ "$action" = upgrade ] && grep -qx 'GPU_MEDIC_SUDO=0' "$front" 2>/dev/null; }; then sudo_word=0; fi
  sed -e "s|^GPU_MEDIC_CORE=.*|GPU_MEDIC_CORE=$core|" -e "s|^GPU_MEDIC_CONFIG=.*|GPU_MEDIC_CONFIG=$conf|" \
    -e "s|^GPU_MEDIC_SUDO=.*|GPU_MEDIC_SUDO=$sudo_word|" "$here/gpu-medic-agent" >"$tmp"
  chown root:root "$tmp" && chmod 0755 "$tmp" && mv -f "$tmp" "$front"
  install -o root -g root -m 0755 "$here/gpu-medic-agent.pl" "$core"
  install -o root -g root -m 0644 "$grammar" "$prefix$libdir/grammar.json"
  say "agent files in $prefix$libdir (root:root, 0755/0644)"
}

ensure_sudo() {
  if command -v sudo >/dev/null 2>&1 && command -v visudo >/dev/null 2>&1; then return; fi
  command -v apt-get >/dev/null 2>&1 || die "sudo is missing and there is no apt-get: install sudo by hand, then run this again"
  say "installing sudo (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q sudo >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q sudo >/dev/null; } ||
    die "apt-get install sudo failed: install sudo by hand, then run this again"
}

ensure_account() {
  # Under --prefix the home is the prefixed one too, so a stock sshd finds its authorized_keys there.
  if id -u "$user" >/dev/null 2>&1; then
    usermod -s /bin/sh -d "$prefix$home" "$user"
    say "account $user exists: shell set to /bin/sh, home $prefix$home"
  else
    useradd --system --home-dir "$prefix$home" --no-create-home --shell /bin/sh --user-group "$user"
    say "account $user created (shell /bin/sh, home $prefix$home)"
  fi
  # No password can match `*`; `!` (passwd -l) would also make an sshd without PAM refuse its key.
  usermod -p '*' "$user"
}

write_sudoers() {
  install -d -o root -g root -m 0755 "$prefix/etc/sudoers.d"
  tmp=$(mktemp "$prefix/etc/sudoers.d/.gpu-medic.XXXXXX")
  printf '# gpu-medic-agent (docs/agent.md): the worker'"'"'s account may run this one program as root, nothing else.\n%s ALL=(root) NOPASSWD: %s\n' "$user" "$core" >"$tmp"
  chown root:root "$tmp"
  chmod 0440 "$tmp"
  if ! visudo -cf "$tmp" >/dev/null; then
    rm -f "$tmp"
    die "visudo refused the sudoers entry; nothing was changed"
  fi
  mv -f "$tmp" "$sudoers"
  [ -n "$prefix" ] || grep -Eq '^[@#]includedir[[:space:]]+/etc/sudoers.d' /etc/sudoers ||
    say "warning: /etc/sudoers does not include /etc/sudoers.d: add '@includedir /etc/sudoers.d' (visudo)"
  say "sudoers entry $sudoers (0440, checked by visudo): $user ALL=(root) NOPASSWD: $core"
}

# `restrict,command="…"[,from="…"] <type> <key> gpu-medic-worker` from the worker's public key file.
key_line() {
  [ -r "$key" ] || die "--key: cannot read $key"
  [ "$(grep -c . "$key")" = 1 ] || die "--key: $key must hold exactly one public key line"
  set -f
  # shellcheck disable=SC2046 # one line: type, base64 key, comment
  set -- $(cat "$key")
  set +f
  case ${1:-} in ssh-ed25519 | ecdsa-sha2-nistp256 | ecdsa-sha2-nistp384 | ecdsa-sha2-nistp521 | ssh-rsa) ;; *) die "--key: $key is not an OpenSSH public key line (no options, type first)" ;; esac
  case ${2:-} in '' | *[!A-Za-z0-9+/=]*) die "--key: $key has no base64 key after its type" ;; esac
  opts="restrict,command=\"$front\""
  [ -z "$from" ] || opts="$opts,from=\"$from\""
  echo "$opts $1 $2 $key_comment"
}

write_authorized_keys() {
  line=$(key_line)
  install -d -o root -g root -m 0755 "$prefix$home" "$akdir"
  tmp=$(mktemp "$akdir/.authorized_keys.XXXXXX")
  echo "$line" >"$tmp"
  chown root:root "$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$ak"
  say "$ak (root-owned, 0644): $line"
}

drop_root_line() {
  [ -f "$rootak" ] || return 0
  tmp=$(mktemp "$rootak.XXXXXX")
  grep -v -F "command=\"$front\"" "$rootak" >"$tmp" || true
  cat "$tmp" >"$rootak"
  rm -f "$tmp"
}

warn_pve() {
  if [ -z "$prefix" ] && { [ -L /root/.ssh/authorized_keys ] || [ -d /etc/pve/priv ]; }; then
    say "WARNING: on a Proxmox cluster /root/.ssh/authorized_keys is /etc/pve/priv/authorized_keys, shared by EVERY node:"
    say "WARNING: this line lets the worker's key in as root on all of them. The dedicated account (without --root-forced) is safer."
  fi
}

write_root_forced() {
  line=$(key_line)
  warn_pve
  install -d -m 0700 "$prefix/root/.ssh"
  drop_root_line
  echo "$line" >>"$rootak"
  # On Proxmox the file is a link into pmxcfs (/etc/pve/priv), whose modes are its own.
  [ -L "$rootak" ] || chmod 0600 "$rootak"
  say "$rootak: $line"
}

install_key_file() { # src dest what
  [ -n "$1" ] || return 0
  openssl pkey -pubin -in "$1" -noout 2>/dev/null || die "$3: $1 is not a PEM public key"
  install -o root -g root -m 0644 "$1" "$2"
  say "$3 in $2"
}

write_config() {
  install -d -o root -g root -m 0755 "$prefix$etcdir"
  install_key_file "$bot_key" "$prefix$etcdir/bot.pub.pem" "bot public key"
  install_key_file "$worker_key" "$prefix$etcdir/worker.pub.pem" "worker public key"
  if [ -e "$conf" ]; then
    say "$conf is kept as it is"
  else
    tmp=$(mktemp "$prefix$etcdir/.agent.conf.XXXXXX")
    sed -e "s|^path=.*|path=${path_dirs:-/usr/sbin:/usr/bin:/sbin:/bin}|" \
      -e "s|^bot_keys=.*|bot_keys=$prefix$etcdir/bot.pub.pem|" \
      -e "s|^worker_keys=.*|worker_keys=$prefix$etcdir/worker.pub.pem|" \
      -e "s|^audit_file=.*|audit_file=$audit_file|" \
      -e "s|^role=.*|role=$role|" \
      -e "s|^unprivileged=.*|unprivileged=$([ "$no_sudo" = 1 ] && echo yes || echo no)|" \
      -e "s|^grammar=.*|grammar=$prefix$libdir/grammar.json|" "$here/agent.conf.example" >"$tmp"
    chown root:root "$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$conf"
    say "config $conf written"
  fi
  if [ "$no_sudo" = 1 ] && ! grep -qx 'unprivileged=yes' "$conf"; then
    # The one line install rewrites in a kept config: without it the core refuses to run as the account.
    tmp=$(mktemp "$prefix$etcdir/.agent.conf.XXXXXX")
    { grep -v '^unprivileged=' "$conf"; echo 'unprivileged=yes'; } >"$tmp"
    chown root:root "$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$conf"
    say "config $conf: unprivileged=yes (--no-sudo)"
  fi
  [ -r "$prefix$etcdir/bot.pub.pem" ] || say "note: no bot public key yet (--bot-key): destructive verbs will be refused"
  [ -r "$prefix$etcdir/worker.pub.pem" ] || say "note: no worker public key yet (--worker-key): destructive verbs will be refused"
  install -d -o root -g root -m 0750 "$prefix$logdir"
  [ -e "$audit_file" ] || : >"$audit_file"
  chown root:root "$audit_file" && chmod 0640 "$audit_file"
  say "audit file $audit_file (root, 0640; used when there is no /dev/log)"
}

do_install() {
  [ -n "$key" ] || die "install needs --key <the worker's public key file>"
  install_agent_files
  write_config
  if [ "$root_forced" = 1 ]; then
    write_root_forced
  elif [ "$no_sudo" = 1 ]; then
    # No sudo: the front runs the core as the account, which then writes its own audit lines.
    ensure_account
    rm -f "$sudoers"
    chown "$user" "$audit_file"
    chgrp "$(id -g "$user")" "$prefix$logdir"
    write_authorized_keys
    say "no sudo (--no-sudo): the agent runs as $user and can read and signal only what $user may"
  else
    ensure_sudo
    ensure_account
    write_sudoers
    write_authorized_keys
  fi
  say "installed: $(do_version)"
  say "verify: ssh $user@<this host> id   (must print 'gpu-medic-agent: refused: ...')"
}

do_version() {
  perl "$core" --config "$conf" -- gpu-medic 1 version 2>&1 || true
}

do_uninstall() {
  if [ "$root_forced" = 1 ]; then
    drop_root_line
    say "removed the agent's line from $rootak"
  else
    rm -f "$sudoers" "$ak"
    [ ! -d "$akdir" ] || rmdir "$akdir" 2>/dev/null || say "kept $akdir (it holds other files)"
    [ ! -d "$prefix$home" ] || rmdir "$prefix$home" 2>/dev/null || say "kept $prefix$home (it holds other files)"
    if id -u "$user" >/dev/null 2>&1; then
      if userdel "$user"; then say "account $user removed"; else say "could not remove the account $user (a process of it still running?): run userdel $user"; fi
    fi
  fi
  rm -f "$front" "$core" "$prefix$libdir/grammar.json"
  rmdir "$prefix$libdir" 2>/dev/null || true
  rm -f "$conf" "$prefix$etcdir/bot.pub.pem" "$prefix$etcdir/worker.pub.pem"
  rmdir "$prefix$etcdir" 2>/dev/null || true
  say "removed the agent, its config and keys; kept sudo and the audit file $audit_file"
}

do_status() {
  rc=0
  if id -u "$user" >/dev/null 2>&1; then
    say "account $user: shell $(getent passwd "$user" | cut -d: -f7), home $(getent passwd "$user" | cut -d: -f6)"
  else
    say "account $user: none"
  fi
  for f in "$front" "$core" "$prefix$libdir/grammar.json" "$conf" "$sudoers" "$ak"; do
    if [ -e "$f" ]; then say "$(stat -c '%U:%G %a' "$f") $f"; else say "missing $f"; rc=1; fi
  done
  if [ -e "$sudoers" ]; then
    if visudo -cf "$sudoers" >/dev/null 2>&1; then say "sudoers entry: $(grep -v '^#' "$sudoers")"; else say "sudoers entry does not parse"; rc=1; fi
  fi
  [ ! -e "$ak" ] || say "authorized_keys: $(cut -c1-160 "$ak")"
  [ -n "$prefix" ] || ! command -v sudo >/dev/null 2>&1 || sudo -l -U "$user" 2>/dev/null | sed 's/^/gpu-medic-agent install: sudo -l: /' || true
  [ ! -e "$core" ] || say "version: $(do_version)"
  return $rc
}

case $action in
  install) do_install ;;
  upgrade)
    [ -e "$front" ] || die "no agent installed at $prefix$libdir (use install)"
    install_agent_files
    say "upgraded: $(do_version)"
    ;;
  uninstall) do_uninstall ;;
  status) do_status ;;
esac
