SIDE=$1 SIG=$2 NS=$3; shift 3
case $SIG in TERM|KILL) ;; *) echo "@refused signal"; exit 2;; esac
if command -v perl >/dev/null 2>&1; then
perl - "$SIDE" "$SIG" "$NS" "$@" <<'GPU_MEDIC_PERL'
use strict; use warnings; use POSIX ();
my ($side, $sig, $ns, @t) = @ARGV;
my %NO = (TERM => 15, KILL => 9); my $signo = $NO{$sig};
my $arch = (POSIX::uname())[4];
my %SYS = (x86_64 => [434, 424], aarch64 => [434, 424]);
die "bad signal\n" unless defined $signo;
my $sys = $SYS{$arch};
if (!$sys) { print "\@method none arch $arch\n"; exit 3; }
print "\@method pidfd perl\n";
sub slurp { my ($p) = @_; open(my $h, "<", $p) or return undef; local $/; my $s = <$h>; close $h; return $s; }
sub en { return (grep { $!{$_} } keys %!)[0] // ("errno" . ($! + 0)); }
sub check {
  my ($fd, $pid, $start, $ct) = @_;
  my $st = slurp("/proc/$pid/stat");
  return "unreadable" unless defined $st;
  my $i = rindex($st, ") "); return "unreadable" if $i < 0;
  my @f = split / /, substr($st, $i + 2);
  return "reused" unless defined $f[19] && $f[19] eq $start;
  if ($ns ne "0") {
    my $l = readlink("/proc/$pid/ns/pid");
    if (defined $l) { return "wrong_ns" unless $l eq "pid:[$ns]"; }
    elsif ($side eq "host") { return "unreadable"; }
  }
  if ($side eq "host") {
    my $status = slurp("/proc/$pid/status") // ""; my ($nsl) = $status =~ /^NSpid:\s*([\d\s]+?)\s*$/m;
    return "unreadable" unless defined $nsl;
    my @n = split /\s+/, $nsl; my $last = $n[-1];
    return "init" if $last eq "1" && @n > 1;
    return "wrong_ns" if $ct ne "0" && $last ne $ct;
  }
  opendir(my $d, "/proc/$pid/fd") or return "unreadable";
  my $hold = 0;
  for my $e (readdir $d) { my $l = readlink("/proc/$pid/fd/$e"); $hold = 1 if defined $l && $l =~ m{^/dev/nvidia\d+$}; }
  closedir $d;
  return "not_holding" unless $hold;
  return "";
}
sub one {
  my ($pid, $start, $ct) = @_;
  my $fd = syscall($sys->[0], $pid + 0, 0);
  if ($fd < 0) { return $!{ESRCH} ? "gone" : "failed " . en(); }
  my $r;
  # Signal 0 first: a process we may not signal at all is refused as such, before any check.
  if (syscall($sys->[1], $fd + 0, 0, 0, 0) != 0) { $r = $!{EPERM} ? "eperm" : "gone"; POSIX::close($fd); return $r; }
  my $why = check($fd, $pid, $start, $ct);
  if (syscall($sys->[1], $fd + 0, 0, 0, 0) != 0) { $r = "gone"; }
  elsif ($why ne "") { $r = $why; }
  elsif (syscall($sys->[1], $fd + 0, $signo + 0, 0, 0) == 0) { $r = "sent"; }
  else { $r = $!{ESRCH} ? "gone" : $!{EPERM} ? "eperm" : "failed " . en(); }
  POSIX::close($fd);
  return $r;
}
while (@t >= 3) { my ($p, $s, $c) = splice(@t, 0, 3); print "\@sig $p " . one($p, $s, $c) . "\n"; }
print "\@done\n";
GPU_MEDIC_PERL
rc=$?; [ $rc = 3 ] || exit $rc
fi
if command -v python3 >/dev/null 2>&1; then
python3 - "$SIDE" "$SIG" "$NS" "$@" <<'GPU_MEDIC_PY'
import errno, os, re, signal, sys
side, sig, ns = sys.argv[1:4]
t = sys.argv[4:]
signo = {"TERM": 15, "KILL": 9}[sig]
if not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
    print("@method none python"); sys.exit(3)
print("@method pidfd python", flush=True)
def slurp(p):
    # Bytes, one character each (latin-1 cannot fail): comm and cmdline may be any bytes.
    try:
        with open(p, "rb") as f: return f.read().decode("latin-1")
    except OSError: return None
def check(pid, start, ct):
    st = slurp("/proc/%s/stat" % pid)
    if st is None or ") " not in st: return "unreadable"
    f = st[st.rindex(") ") + 2:].split(" ")
    if len(f) < 20 or f[19] != start: return "reused"
    if ns != "0":
        try:
            if os.readlink("/proc/%s/ns/pid" % pid) != "pid:[%s]" % ns: return "wrong_ns"
        except OSError:
            if side == "host": return "unreadable"
    if side == "host":
        m = re.search(r"^NSpid:\s*([\d\s]+?)\s*$", slurp("/proc/%s/status" % pid) or "", re.M)
        if not m: return "unreadable"
        n = m.group(1).split()
        if n[-1] == "1" and len(n) > 1: return "init"
        if ct != "0" and n[-1] != ct: return "wrong_ns"
    try: fds = os.listdir("/proc/%s/fd" % pid)
    except OSError: return "unreadable"
    for e in fds:
        try:
            if re.match(r"^/dev/nvidia\d+$", os.readlink("/proc/%s/fd/%s" % (pid, e))): return ""
        except OSError: pass
    return "not_holding"
def en(e): return errno.errorcode.get(e.errno, "errno%s" % e.errno)
def one(pid, start, ct):
    try: fd = os.pidfd_open(int(pid))
    except OSError as e: return "gone" if e.errno == errno.ESRCH else "failed " + en(e)
    try:
        try: signal.pidfd_send_signal(fd, 0)
        except OSError as e: return "eperm" if e.errno == errno.EPERM else "gone"
        # Whatever one PID's check raises, it is this PID's answer: the later PIDs still get theirs.
        try: why = check(pid, start, ct)
        except Exception: why = "failed check"
        try: signal.pidfd_send_signal(fd, 0)
        except OSError: return "gone"
        if why: return why
        try: signal.pidfd_send_signal(fd, signo); return "sent"
        except OSError as e: return "gone" if e.errno == errno.ESRCH else "eperm" if e.errno == errno.EPERM else "failed " + en(e)
    finally: os.close(fd)
for i in range(0, len(t) - 2, 3): print("@sig %s %s" % (t[i], one(t[i], t[i + 1], t[i + 2])), flush=True)
print("@done")
GPU_MEDIC_PY
rc=$?; [ $rc = 3 ] || exit $rc
fi
if [ "$SIDE" != container ]; then echo "@method none"; echo "@refused no pidfd (neither perl nor python3 >= 3.9)"; exit 4; fi
echo "@method shell"
one() {
  st=$(cat "/proc/$1/stat" 2>/dev/null) || { echo gone; return; }
  r=${st##*) }
  # shellcheck disable=SC2086 # $r is the stat fields, split into words on purpose
  set -- "$1" "$2" $r
  p=$1; s=$2; shift 21
  [ "$1" = "$s" ] || { echo reused; return; }
  if [ "$NS" != 0 ]; then l=$(readlink "/proc/$p/ns/pid" 2>/dev/null) && [ "$l" != "pid:[$NS]" ] && { echo wrong_ns; return; }; fi
  [ -r "/proc/$p/fd" ] || { echo unreadable; return; }
  h=0
  for f in /proc/"$p"/fd/*; do case $(readlink "$f" 2>/dev/null) in /dev/nvidia[0-9]|/dev/nvidia[0-9][0-9]|/dev/nvidia[0-9][0-9][0-9]) h=1;; esac; done
  [ $h = 1 ] || { echo not_holding; return; }
  if e=$(kill -s "$SIG" "$p" 2>&1); then echo sent; else case $e in *ermitted*) echo eperm;; *"No such"*) echo gone;; *) echo failed kill;; esac; fi
}
while [ $# -ge 3 ]; do echo "@sig $1 $(one "$1" "$2")"; shift 3; done
echo @done