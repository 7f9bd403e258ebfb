#!/bin/sh
# Installs, upgrades, removes or shows gpu-medic-agent on one host (docs/agent.md, agent/PROTOCOL.md).
#
#   sh install.sh install --key worker.pub [--key-name NAME] [--from CIDRS] [--user gpu-medic] [--adopt]
#                         [--machine ID] [--vmid N] [--bot-key bot.pub.pem [--bot-key-name NAME]]
#                         [--worker-key worker.pub.pem [--worker-key-name NAME]] [--path DIRS] [--role host|self]
#                         [--root-forced] [--grammar FILE] [--remove-root-lines] [--no-penalty-exempt]
#                         [--no-sudo]   (with --role self: the account runs the agent itself, not as root)
#   sh install.sh upgrade   [--user gpu-medic] [--root-forced] [--grammar FILE] [--machine ID] [--vmid N]
#                           [--key worker.pub [--key-name NAME] [--from CIDRS]] [--remove-key FINGERPRINT|COMMENT]
#                           [--bot-key FILE] [--remove-bot-key NAME] [--worker-key FILE] [--remove-worker-key NAME]
#                           [--remove-root-lines]
#   sh install.sh uninstall [--user gpu-medic] [--root-forced] [--remove-root-lines]
#   sh install.sh status    [--user gpu-medic] [--root-forced]
#   any of them with --prefix DIR (tests): every file under DIR instead of /, the account itself real
#   (its home DIR/var/lib/<user>, so sshd's default AuthorizedKeysFile finds the forced key there).
#
# Keys are added and removed one by one, never overwritten as a set, so a rotation overlaps old and new:
# --key adds a forced line (--remove-key removes one), --bot-key / --worker-key add a PEM file to the
# config's bot_keys= / worker_keys= list (named by --*-key-name or by its fingerprint; --remove-*-key NAME).
#
# Run as root. Safe to run again: install rewrites what it owns and keeps an existing agent.conf.
set -eu
umask 022
export LC_ALL=C
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

here=$(cd "$(dirname "$0")" && pwd)
say() { echo "gpu-medic-agent install: $*"; }
die() {
  echo "gpu-medic-agent install: error: $*" >&2
  exit 1
}

[ $# -ge 1 ] || die "usage: sh install.sh install|upgrade|uninstall|status [options] (see the top of this file)"
action=$1
shift
key='' key_name='' remove_keys='' from='' user=gpu-medic root_forced=0 prefix='' path_dirs='' role='' no_sudo=0
bot_key='' bot_key_name='' worker_key='' worker_key_name='' remove_bot_keys='' remove_worker_keys=''
machine='' machine_set=0 vmid='' vmid_set=0 adopt=0 remove_root_lines=0 penalty_exempt=1 grammar="$here/grammar.json"
while [ $# -gt 0 ]; do
  case $1 in
    --key) key=${2:?--key needs a file}; shift 2 ;;
    --key-name) key_name=${2:?--key-name needs a name}; shift 2 ;;
    --remove-key) remove_keys="$remove_keys ${2:?--remove-key needs a fingerprint or comment}"; shift 2 ;;
    --from) from=${2:?--from needs a list}; shift 2 ;;
    --user) user=${2:?--user needs a name}; shift 2 ;;
    --adopt) adopt=1; shift ;;
    --machine) machine=${2?--machine needs an inventory id}; machine_set=1; shift 2 ;;
    --vmid) vmid=${2:?--vmid needs a container id}; vmid_set=1; shift 2 ;;
    --bot-key) bot_key=${2:?--bot-key needs a file}; shift 2 ;;
    --bot-key-name) bot_key_name=${2:?--bot-key-name needs a name}; shift 2 ;;
    --remove-bot-key) remove_bot_keys="$remove_bot_keys ${2:?--remove-bot-key needs a name}"; shift 2 ;;
    --worker-key) worker_key=${2:?--worker-key needs a file}; shift 2 ;;
    --worker-key-name) worker_key_name=${2:?--worker-key-name needs a name}; shift 2 ;;
    --remove-worker-key) remove_worker_keys="$remove_worker_keys ${2:?--remove-worker-key needs a name}"; shift 2 ;;
    --path) path_dirs=${2:?--path needs dirs}; shift 2 ;;
    --role) role=${2:?--role needs host or self}; shift 2 ;;
    --grammar) grammar=${2:?--grammar needs a file}; shift 2 ;;
    --prefix) prefix=${2:?--prefix needs a dir}; shift 2 ;;
    --root-forced) root_forced=1; shift ;;
    --remove-root-lines) remove_root_lines=1; shift ;;
    --no-penalty-exempt) penalty_exempt=0; shift ;;
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
case $role in '' | host | self) ;; *) die "--role: host (a Proxmox host) or self (a container reached at its own address), not $role" ;; esac
# The same rules as the core's (agent/gpu-medic-agent.pl load_config): what passes here, the core reads.
if [ "$machine_set" = 1 ]; then
  case $machine in [A-Za-z0-9]*) ;; *) die "--machine: not an inventory id (letters, digits, _ . -, up to 63): $machine" ;; esac
  case $machine in *[!A-Za-z0-9_.-]*) die "--machine: not an inventory id (letters, digits, _ . -, up to 63): $machine" ;; esac
  [ "${#machine}" -le 63 ] || die "--machine: longer than 63: $machine"
fi
if [ "$vmid_set" = 1 ]; then
  case $vmid in [1-9][0-9][0-9]*) ;; *) die "--vmid: not a container id (100 to 999999999): $vmid" ;; esac
  case $vmid in *[!0-9]*) die "--vmid: not a container id: $vmid" ;; esac
  [ "${#vmid}" -le 9 ] || die "--vmid: not a container id: $vmid"
fi
for n in $key_name $remove_keys $bot_key_name $remove_bot_keys $worker_key_name $remove_worker_keys; do
  case $n in *[!A-Za-z0-9_.:+/@=-]*) die "not a key name or fingerprint: $n" ;; esac
done
case $bot_key_name$worker_key_name in */*) die "--bot-key-name / --worker-key-name: no slash" ;; esac
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
accounts=$prefix$etcdir/accounts
sudoers=$prefix/etc/sudoers.d/$user
akdir=$prefix$home/.ssh
ak=$akdir/authorized_keys
rootak=$prefix/root/.ssh/authorized_keys
rootak2=$prefix/root/.ssh/authorized_keys2
dropin=$prefix/etc/ssh/sshd_config.d/gpu-medic-agent.conf
audit_file=$prefix$logdir/agent-audit.log
key_comment=gpu-medic-worker
forced="command=\"$front\""
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---------------------------------------------------------------- small helpers

# Writes stdin over FILE in place (keeps its owner and mode, and a link into pmxcfs stays a link).
write_in_place() {
  cat >"$work/in-place"
  cat "$work/in-place" >"$1"
}

# Replaces FILE by stdin: a new root-owned file of MODE, moved into place.
write_new() { # file mode
  t=$(mktemp "$(dirname "$1")/.gpu-medic.XXXXXX")
  cat >"$t"
  chown root:root "$t" && chmod "$2" "$t" && mv -f "$t" "$1"
}

# The value of KEY in agent.conf (the last line wins, as in the core); status 1 when no line sets it.
conf_get() {
  [ -f "$conf" ] && grep -q "^$1=" "$conf" || return 1
  sed -n "s/^$1=//p" "$conf" | tail -n 1 | sed 's/^[[:space:]]*//; s/[[:space:]]*$//'
}

# Sets KEY=VALUE in agent.conf: the line that sets it is rewritten, or one is added.
conf_set() {
  awk -v k="$1" -v v="$2" '
    index($0, k "=") == 1 { if (!done) print k "=" v; done = 1; next }
    { print }
    END { if (!done) print k "=" v }
  ' "$conf" | write_new "$conf" 0644
}

# The key blobs (base64) of an authorized_keys file, one per line, in file order.
blobs_of() {
  [ -f "$1" ] || return 0
  awk '/^[ \t]*(#|$)/ { next }
    { for (i = 1; i < NF; i++) if ($i ~ /^(ssh-|ecdsa-|sk-)/ && $(i + 1) ~ /^AAAA[A-Za-z0-9+\/=]+$/) { print $(i + 1); break } }' "$1"
}

# `<line number> <1 if the agent's forced line, else 0> <type> <blob> <comment>` for each line of FILE
# holding one of the blobs listed in BLOBFILE.
lines_holding() { # file blobfile
  [ -f "$1" ] || return 0
  awk -v forced="$forced" -v bf="$2" '
    BEGIN { while ((getline b < bf) > 0) want[b] = 1 }
    /^[ \t]*(#|$)/ { next }
    { for (i = 1; i < NF; i++) if ($i ~ /^(ssh-|ecdsa-|sk-)/ && ($(i + 1) in want)) {
        c = (i + 2 <= NF) ? $NF : "-"; print NR, (index($0, forced) ? 1 : 0), $i, $(i + 1), c; break } }' "$1"
}

# Deletes the given line numbers ("3 7") from FILE, in place.
drop_line_numbers() { # file numbers
  awk -v drop=" $2 " 'index(drop, " " NR " ") == 0' "$1" | write_in_place "$1"
}

fingerprint() { # type blob
  printf '%s %s\n' "$1" "$2" | ssh-keygen -l -f - 2>/dev/null | awk '{ print $2 }'
}

# Non-empty, non-comment lines of a file.
count_lines() { if [ -f "$1" ]; then grep -cv '^[[:space:]]*\(#\|$\)' "$1" || true; else echo 0; fi; }

# ---------------------------------------------------------------- agent files

install_agent_files() {
  if [ ! -r "$here/gpu-medic-agent" ] || [ ! -r "$here/gpu-medic-agent.pl" ]; then die "gpu-medic-agent and gpu-medic-agent.pl must sit beside install.sh"; fi
  [ -r "$grammar" ] || die "no grammar file at $grammar"
  perl -MJSON::PP -e 'local $/; my $g = JSON::PP->new->decode(<STDIN>); exit(($g->{protocol} // 0) == 1 ? 0 : 1)' <"$grammar" ||
    die "$grammar is not a protocol 1 grammar"
  perl -c "$here/gpu-medic-agent.pl" >/dev/null 2>&1 || die "gpu-medic-agent.pl does not compile with this perl ($(perl -e 'print $^V'))"
  install -d -o root -g root -m 0755 "$prefix$libdir"
  # The front's two constants: where the core and its config are (root-owned, so the caller cannot change them).
  # An upgrade keeps how the front runs the core (GPU_MEDIC_SUDO=0 after install --no-sudo).
  sudo_word=1
  if [ "$no_sudo" = 1 ] || { [ "$action" = upgrade ] && grep -qx 'GPU_MEDIC_SUDO=0' "$front" 2>/dev/null; }; then sudo_word=0; fi
  sed -e "s|^GPU_MEDIC_CORE=.*|GPU_MEDIC_CORE=$core|" -e "s|^GPU_MEDIC_CONFIG=.*|GPU_MEDIC_CONFIG=$conf|" \
    -e "s|^GPU_MEDIC_SUDO=.*|GPU_MEDIC_SUDO=$sudo_word|" "$here/gpu-medic-agent" | write_new "$front" 0755
  # The core's own constant: the one config it accepts through sudo (root-owned, like the front's).
  sed -e "s|^use constant DEFAULT_CONFIG => .*|use constant DEFAULT_CONFIG => '$conf';|" "$here/gpu-medic-agent.pl" | write_new "$core" 0755
  install -o root -g root -m 0644 "$grammar" "$prefix$libdir/grammar.json"
  # The scripts the grammar names (by checksum), from scripts/ beside the grammar file.
  rm -rf "$prefix$libdir/scripts"
  if [ -d "$(dirname "$grammar")/scripts" ]; then
    install -d -o root -g root -m 0755 "$prefix$libdir/scripts"
    for f in "$(dirname "$grammar")"/scripts/*; do
      [ -f "$f" ] && install -o root -g root -m 0644 "$f" "$prefix$libdir/scripts/$(basename "$f")"
    done
  fi
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

# ---------------------------------------------------------------- the account

# How install.sh knows an account is its own: a line `created <user>` or `adopted <user>` in
# /etc/gpu-medic/accounts (root-owned), written when it made or adopted the account.
account_is_ours() { [ -f "$accounts" ] && grep -Eqx "(created|adopted) $user" "$accounts"; }

record_account() { # created|adopted
  install -d -o root -g root -m 0755 "$prefix$etcdir"
  { [ ! -f "$accounts" ] || grep -Evx "(created|adopted) $user" "$accounts" || true; echo "$1 $user"; } | write_new "$accounts" 0644
}

# An account made by an install.sh that wrote no marker (an older one, or another host's sharing this
# /etc/passwd): exactly what install.sh makes, with nothing to clean: the agent's home and /bin/sh, the
# password `*`, no other group, no authorized_keys2, an authorized_keys (if any) of forced lines only.
account_from_earlier_install() {
  [ "$(getent passwd "$user" | cut -d: -f6-7)" = "$prefix$home:/bin/sh" ] || return 1
  [ "$(getent shadow "$user" | cut -d: -f2)" = '*' ] || return 1
  [ ! -e "$akdir/authorized_keys2" ] || return 1
  [ ! -f "$ak" ] || [ "$(grep -cvF "$forced" "$ak" || true)" = 0 ] || return 1
  [ "$(id -Gn "$user")" = "$(id -gn "$user")" ]
}

# Refused before anything is written: an account that exists and that install.sh did not make.
check_account() {
  id -u "$user" >/dev/null 2>&1 || return 0
  account_is_ours && return 0
  account_from_earlier_install && return 0
  [ "$adopt" = 1 ] ||
    die "the account $user exists and install.sh did not make it ($accounts does not name it): its other keys (authorized_keys, authorized_keys2), its groups (e.g. sudo) and any password would stay a second way in. Use a new --user, or take it over with --adopt: that drops its other keys and its supplementary groups"
}

# --adopt: the account keeps its name and uid, and loses every other way in and every other group.
adopt_account() {
  old_home=$(getent passwd "$user" | cut -d: -f6)
  primary=$(id -gn "$user")
  others=$(id -Gn "$user" | tr ' ' '\n' | grep -vx "$primary" | tr '\n' ' ' | sed 's/ $//' || true)
  if [ -n "$others" ]; then
    usermod -G '' "$user"
    say "adopted $user: dropped its supplementary groups: $others"
  else
    say "adopted $user: it had no supplementary groups"
  fi
  for d in "$old_home/.ssh" "$akdir"; do
    for f in "$d/authorized_keys" "$d/authorized_keys2"; do
      [ -f "$f" ] || continue
      [ "$f" != "$ak" ] || [ "$(grep -cvF "$forced" "$f" || true)" != 0 ] || continue
      n=$(count_lines "$f")
      mv -f "$f" "$f.dropped-by-gpu-medic"
      say "adopted $user: dropped $f ($n key line(s)): moved to $f.dropped-by-gpu-medic, which sshd does not read"
    done
  done
  record_account adopted
}

ensure_account() {
  # Under --prefix the home is the prefixed one too, so a stock sshd finds its authorized_keys there.
  if id -u "$user" >/dev/null 2>&1; then
    if account_is_ours; then
      say "account $user exists (made or adopted by install.sh, $accounts)"
    elif account_from_earlier_install; then
      record_account created
      say "account $user exists, as install.sh makes it (its home and shell, password '*', no other group or key): recorded in $accounts"
    else
      adopt_account
    fi
    usermod -s /bin/sh -d "$prefix$home" "$user"
    say "account $user: shell set to /bin/sh, home $prefix$home"
  else
    useradd --system --home-dir "$prefix$home" --no-create-home --shell /bin/sh --user-group "$user"
    record_account created
    say "account $user created (shell /bin/sh, home $prefix$home), recorded in $accounts"
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

# ---------------------------------------------------------------- the worker's SSH key (forced lines)

# `restrict,command="…"[,from="…"] <type> <key> <comment>` from the worker's public key file.
key_line() {
  [ -r "$key" ] || die "--key: cannot read $key"
  [ "$(grep -c . "$key")" = 1 ] || die "--key: $key must hold exactly one public key line"
  set -f
  # shellcheck disable=SC2046 # one line: type, base64 key, comment
  set -- $(cat "$key")
  set +f
  case ${1:-} in ssh-ed25519 | ecdsa-sha2-nistp256 | ecdsa-sha2-nistp384 | ecdsa-sha2-nistp521 | ssh-rsa) ;; *) die "--key: $key is not an OpenSSH public key line (no options, type first)" ;; esac
  case ${2:-} in '' | *[!A-Za-z0-9+/=]*) die "--key: $key has no base64 key after its type" ;; esac
  opts="restrict,$forced"
  [ -z "$from" ] || opts="$opts,from=\"$from\""
  echo "$opts $1 $2 ${key_name:-$key_comment}"
}

# The file that holds the forced lines: root's (--root-forced) or the account's.
forced_file() { if [ "$root_forced" = 1 ]; then echo "$rootak"; else echo "$ak"; fi; }

# Adds the --key line to FILE; a line for the same key is replaced (a new --from), other lines stay.
add_forced_line() {
  f=$1
  line=$(key_line)
  set -f
  # shellcheck disable=SC2086 # the line's words
  set -- $line
  set +f
  blob=$3
  [ -n "$from" ] || say "note: no --from: ANY source address may use this key; name the worker's addresses with --from"
  if [ "$f" = "$rootak" ]; then
    warn_pve
    install -d -m 0700 "$prefix/root/.ssh"
    [ -e "$f" ] || { : >"$f" && chmod 0600 "$f"; }
  else
    install -d -o root -g root -m 0755 "$prefix$home" "$akdir"
    [ -e "$f" ] || : | write_new "$f" 0644
  fi
  # In the account's file every line is the agent's; a line without the forced command is another way in.
  if [ "$f" = "$ak" ] && grep -qvF "$forced" "$f"; then
    n=$(grep -cvF "$forced" "$f")
    say "dropped $n line(s) from $f that were not the agent's forced command"
  fi
  if [ "$f" = "$ak" ]; then
    { grep -F "$forced" "$f" | awk -v b="$blob" '{ for (i = 1; i <= NF; i++) if ($i == b) next; print }'; echo "$line"; } | write_new "$f" 0644
  else
    { awk -v b="$blob" -v forced="$forced" 'index($0, forced) { for (i = 1; i <= NF; i++) if ($i == b) next } { print }' "$f"; echo "$line"; } | write_in_place "$f"
    # On Proxmox the file is a link into pmxcfs (/etc/pve/priv), whose modes are its own.
    [ -L "$f" ] || chmod 0600 "$f"
  fi
  say "$f: $line"
  say "$f: $(grep -cF "$forced" "$f") forced line(s) for the agent"
}

# Removes the agent's forced line whose key has fingerprint X (SHA256:…) or whose comment is X.
remove_forced_line() { # file X
  f=$1
  [ -f "$f" ] || die "--remove-key: no $f"
  : >"$work/hits"
  awk -v forced="$forced" 'index($0, forced) { for (i = 1; i < NF; i++) if ($i ~ /^(ssh-|ecdsa-|sk-)/) { print NR, $i, $(i + 1), $NF; break } }' "$f" >"$work/forced"
  total=$(grep -c . "$work/forced" || true)
  while read -r n t b c; do
    if [ "$c" = "$2" ] || [ "$(fingerprint "$t" "$b")" = "$2" ]; then echo "$n $t $b $c" >>"$work/hits"; fi
  done <"$work/forced"
  hits=$(grep -c . "$work/hits" || true)
  [ "$hits" != 0 ] || die "--remove-key: no forced line in $f has the fingerprint or comment $2 (status lists them)"
  [ "$hits" = 1 ] || die "--remove-key: $hits lines in $f match $2: name one by its fingerprint (status lists them)"
  [ "$total" -gt 1 ] || die "--remove-key: $2 is the only forced line in $f: the worker would have no way in. Add the new key first (--key), or uninstall"
  read -r n t b c <"$work/hits"
  drop_line_numbers "$f" "$n"
  say "$f: removed the forced line $(fingerprint "$t" "$b") $c (line $n); $((total - 1)) left"
}

warn_pve() {
  if [ -z "$prefix" ] && { [ -L /root/.ssh/authorized_keys ] || [ -d /etc/pve/priv ]; }; then
    say "WARNING: on a Proxmox cluster /root/.ssh/authorized_keys is /etc/pve/priv/authorized_keys, shared by EVERY node:"
    say "WARNING: this line lets the worker's key in as root on all of them. The dedicated account (without --root-forced) is safer."
  fi
}

# ---------------------------------------------------------------- root's lines holding the worker's key (finding 6)

# The worker's keys: the --key given, and every key of the agent's forced lines (the account's, root's).
collect_worker_blobs() {
  : >"$work/blobs"
  if [ -n "$key" ] && [ -r "$key" ]; then blobs_of "$key" >>"$work/blobs"; fi
  blobs_of "$ak" >>"$work/blobs"
  for f in "$rootak" "$rootak2"; do
    [ ! -f "$f" ] || grep -F "$forced" "$f" | awk '{ for (i = 1; i < NF; i++) if ($i ~ /^(ssh-|ecdsa-|sk-)/) { print $(i + 1); break } }' >>"$work/blobs"
  done
  sort -u "$work/blobs" -o "$work/blobs"
}

# Finds, reports and (--remove-root-lines, or on uninstall the agent's own forced lines) removes every
# line of root's authorized_keys and authorized_keys2 that holds the worker's key. Sets root_lines_left.
check_root_lines() {
  root_lines_left=0
  collect_worker_blobs
  [ -s "$work/blobs" ] || return 0
  for f in "$rootak" "$rootak2"; do
    lines_holding "$f" "$work/blobs" >"$work/root-hits"
    drop=''
    while read -r n isforced t b c; do
      fp=$(fingerprint "$t" "$b")
      where="$f line $n ($fp $c)"
      if [ "$isforced" = 1 ] && [ "$action" = uninstall ]; then
        drop="$drop $n"
        say "removed the agent's --root-forced line from $where"
      elif [ "$isforced" = 1 ] && [ "$root_forced" = 1 ]; then
        say "$where: the agent's forced line (--root-forced)"
      elif [ "$remove_root_lines" = 1 ]; then
        drop="$drop $n"
        say "removed $where: it held the worker's key (--remove-root-lines)"
      else
        root_lines_left=1
        if [ "$isforced" = 1 ]; then
          say "WARNING: $where holds the worker's key as root, forced to the agent (a --root-forced install): a second way in beside the account. Remove it with --remove-root-lines"
        else
          say "WARNING: $where holds the worker's key WITHOUT the agent's forced command: whoever holds the key has a root shell. Remove it with --remove-root-lines (on a Proxmox cluster the file is shared by every node)"
        fi
      fi
    done <"$work/root-hits"
    [ -z "$drop" ] || drop_line_numbers "$f" "$drop"
  done
}

# ---------------------------------------------------------------- the PEM keys (bot_keys=, worker_keys=)

pem_fingerprint() { openssl pkey -pubin -in "$1" -outform DER 2>/dev/null | openssl dgst -sha256 -r | cut -c1-64; }

# The current list of KIND_keys= (the core's default when the config has no such line).
key_list() {
  conf_get "$1_keys" || { [ ! -f "$prefix$etcdir/$1.pub.pem" ] || echo "$prefix$etcdir/$1.pub.pem"; }
}

# Adds FILE as a new key of KIND (bot, worker): a new file named NAME (or KIND-<fingerprint>), appended
# to the list; keys already there stay (a rotation overlaps old and new).
add_pem_key() { # kind file name
  [ -n "$2" ] || return 0
  openssl pkey -pubin -in "$2" -noout 2>/dev/null || die "--$1-key: $2 is not a PEM public key"
  fp=$(pem_fingerprint "$2")
  name=${3:-$1-$(echo "$fp" | cut -c1-16)}
  dest=$prefix$etcdir/$name.pub.pem
  list=$(key_list "$1")
  old_ifs=$IFS
  IFS=,
  for k in $list; do
    k=$(echo "$k" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
    if [ -f "$k" ] && [ "$(pem_fingerprint "$k")" = "$fp" ]; then
      IFS=$old_ifs
      say "$1 public key $fp is already listed ($k): nothing to add"
      return 0
    fi
  done
  IFS=$old_ifs
  [ ! -e "$dest" ] || die "--$1-key: $dest exists and holds another key: choose another --$1-key-name"
  install -o root -g root -m 0644 "$2" "$dest"
  conf_set "$1_keys" "${list:+$list,}$dest"
  say "$1 public key $name (sha256 $fp) added: $dest; $1_keys=$(conf_get "$1_keys")"
}

# Removes the key named NAME (its file name without .pub.pem, or its sha256 fingerprint) from the list.
remove_pem_key() { # kind name
  list=$(key_list "$1")
  new='' found=''
  old_ifs=$IFS
  IFS=,
  for k in $list; do
    k=$(echo "$k" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
    [ -n "$k" ] || continue
    b=$(basename "$k" .pub.pem)
    if [ -z "$found" ] && { [ "$b" = "$2" ] || [ "$(basename "$k")" = "$2" ] || { [ -f "$k" ] && [ "$(pem_fingerprint "$k")" = "$2" ]; }; }; then
      found=$k
    else
      new="${new:+$new,}$k"
    fi
  done
  IFS=$old_ifs
  [ -n "$found" ] || die "--remove-$1-key: no key named $2 in $1_keys=$list"
  conf_set "$1_keys" "$new"
  case $found in "$prefix$etcdir"/*) rm -f "$found" ;; esac
  say "$1 public key $2 removed ($found); $1_keys=$new"
  [ -n "$new" ] || say "note: no $1 public key left: destructive verbs will be refused"
}

# ---------------------------------------------------------------- the config

write_config() {
  install -d -o root -g root -m 0755 "$prefix$etcdir"
  if [ -e "$conf" ]; then
    say "$conf is kept as it is"
  else
    r=${role:-host}
    sed -e "s|^path=.*|path=${path_dirs:-/usr/sbin:/usr/bin:/sbin:/bin}|" \
      -e "s|^bot_keys=.*|bot_keys=|" \
      -e "s|^worker_keys=.*|worker_keys=|" \
      -e "s|^audit_file=.*|audit_file=$audit_file|" \
      -e "s|^role=.*|role=$r|" \
      -e "s|^machine=.*|machine=$machine|" \
      -e "s|^vmid=.*|vmid=$vmid|" \
      -e "s|^run_dir=.*|run_dir=$prefix/run/gpu-medic|" \
      -e "s|^unprivileged=.*|unprivileged=$([ "$no_sudo" = 1 ] && echo yes || echo no)|" \
      -e "s|^grammar=.*|grammar=$prefix$libdir/grammar.json|" "$here/agent.conf.example" | write_new "$conf" 0644
    say "config $conf written"
  fi
  if [ "$no_sudo" = 1 ] && ! grep -qx 'unprivileged=yes' "$conf"; then
    # Without it the core refuses to run as the account.
    conf_set unprivileged yes
    say "config $conf: unprivileged=yes (--no-sudo)"
  fi
  if [ -n "$role" ] && [ "$(conf_get role || echo host)" != "$role" ]; then
    conf_set role "$role"
    say "config $conf: role=$role"
  fi
  install -d -o root -g root -m 0750 "$prefix$logdir"
  [ -e "$audit_file" ] || : >"$audit_file"
  chown root:root "$audit_file" && chmod 0640 "$audit_file"
  say "audit file $audit_file (root, 0640; used when there is no /dev/log)"
}

# --machine, --vmid, --bot-key, --worker-key and their removals, on a new or a kept config.
update_config() {
  if [ "$machine_set" = 1 ] && [ "$(conf_get machine || true)" != "$machine" ]; then
    conf_set machine "$machine"
    say "config $conf: machine=$machine"
  fi
  if [ "$vmid_set" = 1 ]; then
    [ "$(conf_get role || echo host)" = self ] || die "--vmid is for an agent in a container reached at its own address (--role self)"
    [ "$(conf_get vmid || true)" = "$vmid" ] || { conf_set vmid "$vmid" && say "config $conf: vmid=$vmid"; }
  fi
  add_pem_key bot "$bot_key" "$bot_key_name"
  add_pem_key worker "$worker_key" "$worker_key_name"
  for n in $remove_bot_keys; do remove_pem_key bot "$n"; done
  for n in $remove_worker_keys; do remove_pem_key worker "$n"; done
  [ -n "$(key_list bot)" ] || say "note: no bot public key yet (--bot-key): destructive verbs will be refused"
  [ -n "$(key_list worker)" ] || say "note: no worker public key yet (--worker-key): destructive verbs will be refused"
  if [ -z "$(conf_get machine || true)" ]; then
    say "note: no machine= (--machine ID, the host's id in the worker's inventory): destructive verbs (signal, reset, persistence) will be refused until it is set (install.sh upgrade --machine ID)"
  fi
  if [ "$(conf_get role || echo host)" = self ] && [ -z "$(conf_get vmid || true)" ]; then
    say "note: role=self without vmid= (--vmid N, this container's id on its host): destructive verbs will be refused until it is set"
  fi
}

# ---------------------------------------------------------------- path= ownership (finding 8)

# Warns when a path= dir (or a dir above it) or a program the agent runs from there is not root's or is
# writable by group or others: whoever can write there chooses what the agent runs as root.
check_path() {
  path_warnings=0
  [ -f "$conf" ] || return 0
  list=$(conf_get path || echo /usr/sbin:/usr/bin:/sbin:/bin)
  progs=$(perl -MJSON::PP -e 'local $/; my $g = JSON::PP->new->decode(<STDIN>); my %p = map { $_->{run}[0] => 1 } values %{ $g->{verbs} }; print join(" ", sort keys %p)' <"$prefix$libdir/grammar.json" 2>/dev/null || true)
  old_ifs=$IFS
  IFS=:
  set -f
  # shellcheck disable=SC2086 # the dirs of path=
  set -- $list
  set +f
  IFS=$old_ifs
  for d in "$@"; do
    [ -d "$d" ] || continue
    p=$d
    while :; do
      st=$(stat -L -c '%u %a' "$p")
      uid=${st% *} m=${st#* }
      bad=''
      [ "$uid" = 0 ] || bad="owned by uid $uid"
      if [ $((0$m & 022)) != 0 ] && { [ "$p" = "$d" ] || [ $((0$m & 01000)) = 0 ]; }; then bad="${bad:+$bad, }writable by group or others (mode $m)"; fi
      if [ -n "$bad" ]; then
        path_warnings=$((path_warnings + 1))
        if [ "$p" = "$d" ]; then
          say "WARNING: path= dir $d is $bad: whoever can write there chooses the programs the agent runs as root"
        else
          say "WARNING: $p (above the path= dir $d) is $bad: whoever can write there can replace $d"
        fi
      fi
      [ "$p" != / ] || break
      p=$(dirname "$p")
    done
  done
  for prog in $progs openssl logger pct; do
    for d in "$@"; do
      if [ ! -f "$d/$prog" ] || [ ! -x "$d/$prog" ]; then continue; fi
      st=$(stat -L -c '%u %a' "$d/$prog")
      uid=${st% *} m=${st#* }
      if [ "$uid" != 0 ] || [ $((0$m & 022)) != 0 ]; then
        path_warnings=$((path_warnings + 1))
        say "WARNING: program $d/$prog (found through path=) is owned by uid $uid, mode $m: it must be root's and writable by root only, or anyone who can write it runs as root"
      fi
      break
    done
  done
}

# ---------------------------------------------------------------- sshd PerSourcePenalties (OpenSSH 9.8+)

# The sshd this host runs (under --prefix, a stand-in at PREFIX/usr/sbin/sshd when there is one).
sshd_prog() {
  if [ -n "$prefix" ] && [ -x "$prefix/usr/sbin/sshd" ]; then echo "$prefix/usr/sbin/sshd"; else command -v sshd || true; fi
}

sshd_main_config() {
  if [ -n "$prefix" ] && [ -f "$prefix/etc/ssh/sshd_config" ]; then echo "$prefix/etc/ssh/sshd_config"; else echo /etc/ssh/sshd_config; fi
}

# OpenSSH 9.8 penalises a source address after failed or abandoned connections (PerSourcePenalties):
# the worker's retries could lock it out. Written only where sshd -V is 9.8 or newer and sshd -t
# accepts it; older sshd refuses its whole config on an unknown option, so nothing is written there.
penalty_exempt() {
  [ "$penalty_exempt" = 1 ] && [ -n "$from" ] || return 0
  exempt=''
  old_ifs=$IFS
  IFS=,
  for a in $from; do
    case $a in *[*?!]*) say "note: PerSourcePenaltyExemptList takes addresses and CIDRs only: $a left out" ;; *) exempt="${exempt:+$exempt,}$a" ;; esac
  done
  IFS=$old_ifs
  [ -n "$exempt" ] || return 0
  sshd=$(sshd_prog)
  [ -n "$sshd" ] || { say "no sshd found: no PerSourcePenaltyExemptList written"; return 0; }
  v=$("$sshd" -V 2>&1 | sed -n 's/^.*OpenSSH_\([0-9][0-9]*\)\.\([0-9][0-9]*\).*$/\1 \2/p' | head -n 1 || true)
  major=${v% *} minor=${v#* }
  if [ -z "$v" ] || [ "$major" -lt 9 ] || { [ "$major" = 9 ] && [ "$minor" -lt 8 ]; }; then
    say "sshd is OpenSSH ${major:-?}.${minor:-?}: it has no PerSourcePenalties (9.8 and newer), so nothing is written for them"
    return 0
  fi
  main=$(sshd_main_config)
  if ! grep -Eqi '^[[:space:]]*Include[[:space:]]+/etc/ssh/sshd_config\.d/\*\.conf' "$main" 2>/dev/null; then
    say "sshd is OpenSSH $major.$minor but $main does not include /etc/ssh/sshd_config.d/*.conf: set 'PerSourcePenaltyExemptList $exempt' there by hand (docs/agent.md)"
    return 0
  fi
  if ! "$sshd" -t -f "$main" -o "PerSourcePenaltyExemptList=$exempt" >"$work/sshd-t" 2>&1; then
    say "sshd -t refused PerSourcePenaltyExemptList $exempt ($(head -n 1 "$work/sshd-t")): nothing written"
    return 0
  fi
  install -d -m 0755 "$(dirname "$dropin")"
  printf '# gpu-medic-agent (install.sh): never penalise the worker'"'"'s address for failed or abandoned\n# connections (PerSourcePenalties, OpenSSH 9.8+), so its retries cannot lock it out of this host.\nPerSourcePenaltyExemptList %s\n' "$exempt" |
    write_new "$dropin" 0644
  if ! "$sshd" -t -f "$main" >"$work/sshd-t" 2>&1; then
    rm -f "$dropin"
    say "sshd -t refused the config with $dropin ($(head -n 1 "$work/sshd-t")): removed it, nothing written"
    return 0
  fi
  say "sshd is OpenSSH $major.$minor: $dropin exempts $exempt from PerSourcePenalties (sshd -t accepts it); reload sshd to apply (systemctl reload ssh)"
}

# ---------------------------------------------------------------- the actions

do_install() {
  [ -n "$key" ] || die "install needs --key <the worker's public key file>"
  key_line >/dev/null
  [ "$vmid_set" = 0 ] || [ "$role" = self ] || [ "$(conf_get role || echo host)" = self ] || die "--vmid is for an agent in a container reached at its own address (--role self)"
  [ "$root_forced" = 1 ] || check_account
  install_agent_files
  write_config
  update_config
  if [ "$root_forced" = 1 ]; then
    add_forced_line "$rootak"
  elif [ "$no_sudo" = 1 ]; then
    # No sudo: the front runs the core as the account, which then writes its own audit lines.
    ensure_account
    rm -f "$sudoers"
    chown "$user" "$audit_file"
    chgrp "$(id -g "$user")" "$prefix$logdir"
    add_forced_line "$ak"
    say "no sudo (--no-sudo): the agent runs as $user and can read and signal only what $user may"
  else
    ensure_sudo
    ensure_account
    write_sudoers
    add_forced_line "$ak"
  fi
  for n in $remove_keys; do remove_forced_line "$(forced_file)" "$n"; done
  check_root_lines
  check_path
  penalty_exempt
  say "installed: $(do_version)"
  say "verify: ssh $user@<this host> id   (must print 'gpu-medic-agent: refused: ...')"
}

do_upgrade() {
  [ -e "$front" ] || die "no agent installed at $prefix$libdir (use install)"
  [ -e "$conf" ] || die "no config at $conf (use install)"
  [ -z "$key" ] || key_line >/dev/null
  install_agent_files
  update_config
  if [ -n "$key" ]; then add_forced_line "$(forced_file)"; fi
  for n in $remove_keys; do remove_forced_line "$(forced_file)" "$n"; done
  check_root_lines
  check_path
  say "upgraded: $(do_version)"
}

do_version() {
  perl "$core" --config "$conf" -- gpu-medic 1 version 2>&1 || true
}

do_uninstall() {
  check_root_lines
  for f in "$rootak" "$rootak2"; do
    if [ -f "$f" ] && grep -qF "$forced" "$f"; then
      grep -vF "$forced" "$f" | write_in_place "$f"
      say "removed the agent's forced line(s) from $f"
    fi
  done
  if [ "$root_forced" = 0 ]; then
    rm -f "$sudoers" "$ak"
    [ ! -d "$akdir" ] || rmdir "$akdir" 2>/dev/null || say "kept $akdir (it holds other files)"
    [ ! -d "$prefix$home" ] || rmdir "$prefix$home" 2>/dev/null || say "kept $prefix$home (it holds other files)"
    if id -u "$user" >/dev/null 2>&1; then
      if [ -f "$accounts" ] && grep -qx "adopted $user" "$accounts"; then
        say "kept the account $user (adopted, not made by install.sh): its agent key and sudoers entry are gone, its password stays '*'"
      elif ! { [ -f "$accounts" ] && grep -qx "created $user" "$accounts"; } && ! account_from_earlier_install; then
        say "kept the account $user: install.sh did not make it"
      elif userdel "$user"; then
        say "account $user removed"
      else
        say "could not remove the account $user (a process of it still running?): run userdel $user"
      fi
    fi
  fi
  if [ -f "$dropin" ]; then
    rm -f "$dropin"
    say "removed $dropin (reload sshd to apply)"
  fi
  rm -f "$front" "$core" "$prefix$libdir/grammar.json"
  rm -rf "$prefix$libdir/scripts"
  rmdir "$prefix$libdir" 2>/dev/null || true
  for kind in bot worker; do
    for k in $(key_list "$kind" | tr ',' ' '); do
      case $k in "$prefix$etcdir"/*) rm -f "$k" ;; esac
    done
  done
  rm -f "$conf" "$accounts" "$prefix$etcdir/bot.pub.pem" "$prefix$etcdir/worker.pub.pem"
  rmdir "$prefix$etcdir" 2>/dev/null || true
  say "removed the agent, its config and keys; kept sudo and the audit file $audit_file"
  [ "$root_lines_left" = 0 ] || say "WARNING: root's authorized_keys still hold the worker's key (above): run again with --remove-root-lines, or remove them by hand"
}

# One key file: its line count, and each key's fingerprint, comment and options.
show_key_file() { # label file
  if [ ! -e "$2" ]; then
    say "$1 $2: none"
    return 0
  fi
  say "$1 $2: $(count_lines "$2") line(s), $(stat -c '%U:%G %a' "$2")"
  awk '/^[ \t]*(#|$)/ { next }
    { for (i = 1; i < NF; i++) if ($i ~ /^(ssh-|ecdsa-|sk-)/) { o = (i > 1) ? $1 : "(no options)"; print $i, $(i + 1), (i + 2 <= NF ? $NF : "-"), o; break } }' "$2" |
    while read -r t b c o; do say "  $(fingerprint "$t" "$b") $c $(echo "$o" | cut -c1-120)"; done
}

do_status() {
  rc=0
  if [ -f "$conf" ]; then
    say "machine=$(conf_get machine || true) vmid=$(conf_get vmid || true) role=$(conf_get role || echo host)"
    [ -n "$(conf_get machine || true)" ] || { say "no machine= in $conf: destructive verbs are refused (install.sh upgrade --machine ID)"; rc=1; }
    for kind in bot worker; do
      say "${kind}_keys=$(key_list "$kind")"
      for k in $(key_list "$kind" | tr ',' ' '); do
        if [ -f "$k" ]; then say "  $(basename "$k" .pub.pem): sha256 $(pem_fingerprint "$k")"; else say "  missing $k"; fi
      done
    done
  fi
  if id -u "$user" >/dev/null 2>&1; then
    how='not made by install.sh'
    if [ -f "$accounts" ] && grep -qx "created $user" "$accounts"; then how='made by install.sh'; fi
    if [ -f "$accounts" ] && grep -qx "adopted $user" "$accounts"; then how='adopted by install.sh'; fi
    say "account $user ($how): shell $(getent passwd "$user" | cut -d: -f7), home $(getent passwd "$user" | cut -d: -f6), groups: $(id -Gn "$user")"
    [ "$(id -Gn "$user")" = "$(id -gn "$user")" ] || { say "WARNING: $user is in groups beyond its own"; rc=1; }
    h=$(getent passwd "$user" | cut -d: -f6)
    show_key_file "key file" "$h/.ssh/authorized_keys"
    show_key_file "key file" "$h/.ssh/authorized_keys2"
    [ ! -e "$h/.ssh/authorized_keys2" ] || rc=1
  else
    say "account $user: none"
  fi
  show_key_file "root key file" "$rootak"
  show_key_file "root key file" "$rootak2"
  check_root_lines
  [ "$root_lines_left" = 0 ] || rc=1
  for f in "$front" "$core" "$prefix$libdir/grammar.json" "$conf" "$sudoers" "$ak"; do
    if [ -e "$f" ]; then say "$(stat -c '%U:%G %a' "$f") $f"; else say "missing $f"; rc=1; fi
  done
  if [ -e "$sudoers" ]; then
    if visudo -cf "$sudoers" >/dev/null 2>&1; then say "sudoers entry: $(grep -v '^#' "$sudoers")"; else say "sudoers entry does not parse"; rc=1; fi
  fi
  [ ! -e "$dropin" ] || say "sshd drop-in $dropin: $(grep -v '^#' "$dropin")"
  check_path
  [ "$path_warnings" = 0 ] || rc=1
  [ -n "$prefix" ] || ! command -v sudo >/dev/null 2>&1 || sudo -l -U "$user" 2>/dev/null | sed 's/^/gpu-medic-agent install: sudo -l: /' || true
  [ ! -e "$core" ] || say "version: $(do_version)"
  return $rc
}

root_lines_left=0
case $action in
  install) do_install ;;
  upgrade) do_upgrade ;;
  uninstall) do_uninstall ;;
  status) do_status ;;
esac
