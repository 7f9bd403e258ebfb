import { CodedError, ErrorCode } from '../../errors.ts';
import { pidIn, type ProcessIdentity } from '../../gpu/process-ref.ts';
import type { DestructiveIds } from '../arg-types.ts';
import type { CommandSpec } from '../command-spec.ts';

/**
 * The one command that signals processes, on the host or inside a container: per PID it checks
 * identity and signals in the same remote process, race-free where the machine allows.
 *
 * With perl (every Proxmox host has it) or python3 ≥ 3.9: `pidfd_open(pid)` first, then the
 * identity is read through `/proc/<pid>` and confirmed to be the pidfd's process (signal 0
 * through the pidfd after the reads: a PID cannot change hands while its process is alive or
 * unreaped), then `pidfd_send_signal`. A PID reused at any point before the signal is either
 * refused by the start-time check or gets ESRCH from the pidfd; it is never signalled.
 * Inside a container with neither, the narrowest check-then-kill in one shell, and the output
 * says so (`@method shell`): that check is not race-free. The host never falls back.
 *
 * Checks, in order: may be signalled at all (signal 0; EPERM is said as such) → start time (`/proc/<pid>/stat` field 22) → PID namespace inode
 * (`/proc/<pid>/ns/pid`, when given) → innermost NSpid (host side: the planned container PID,
 * and never 1: a namespace's init is not a process kill) → an open `/dev/nvidia<N>` in
 * `/proc/<pid>/fd` → still the pidfd's process (signal 0) → signal.
 *
 * argv: `sh -c SCRIPT sh <host|container> <TERM|KILL> <ns inode|0> (<pid> <start> <ctpid|0>)...`;
 * every word is a constant of this file or a decimal integer the worker read itself. What it
 * prints is its grammar, SIGNAL_GRAMMAR below, with the per-PID words in SIGNAL_WORDS.
 *
 * `/proc/<pid>/stat` is read as bytes and its fields start after the LAST `) `: comm (field 2) is
 * whatever the process named itself, `trainer) v2` or bytes that are not UTF-8.
 */

// ---- what the command prints ----

/**
 * The output, one line each, in this order:
 *
 *   @method pidfd perl | @method pidfd python   check and signal are one race-free act (pidfd)
 *   @method shell                               checked, then `kill` in one shell: containers only, not race-free
 *   @method none …                              this path cannot (no pidfd, unknown arch): the next one is tried
 *   @refused <why>                              nothing at all is signalled (bad signal; a host with no pidfd path)
 *   @sig <pid> <word> [<errno name>]            one per PID asked for, in order; <word> is a key of SIGNAL_WORDS
 *   @done                                       every PID was answered
 *
 * A PID with no `@sig` line was not answered: after `@refused` it is `no_pidfd`, otherwise the
 * output was cut short after a signal may have gone out, so it is `failed` (not known), never `sent`.
 */
const SIGNAL_GRAMMAR = {
  methods: { 'pidfd perl': 'pidfd', 'pidfd python': 'pidfd', shell: 'shell' },
  sig: /^@sig (\d{1,15}) (\w+)(?: (\w{1,40}))?$/,
} as const;

/** What the checks refuse a PID for; `no_pidfd` is no word of the script: its PIDs were never tried. */
type SkipReason = 'pid_reused' | 'not_holding' | 'wrong_namespace' | 'container_init' | 'unreadable' | 'no_pidfd';

type Word =
  | { result: 'sent' | 'gone'; text: string }
  | { result: 'skipped'; reason: Exclude<SkipReason, 'no_pidfd'>; text: string }
  | { result: 'failed'; reason: 'not_permitted' | 'other'; text: string };

/**
 * The words of `@sig <pid> <word>`, the one table the three script bodies print from and the
 * parser reads: what each means, and its plain words for the log.
 */
export const SIGNAL_WORDS = {
  /** The signal was delivered to the checked process. */
  sent: { result: 'sent', text: 'sent' },
  /** No such process (ESRCH) at any point: it exited; nothing was signalled. */
  gone: { result: 'gone', text: 'already exited: it ended on its own, so nothing was needed' },
  /** Its start time (stat field 22) is not the planned one: another process has the PID. */
  reused: {
    result: 'skipped',
    reason: 'pid_reused',
    text: 'PID reused: at the moment of the signal its PID belonged to a different process (start time changed)',
  },
  /** No `/dev/nvidia<N>` among its open files (`/proc/<pid>/fd`). */
  not_holding: {
    result: 'skipped',
    reason: 'not_holding',
    text: 'not holding: it no longer has a /dev/nvidia* GPU device open, so nothing was needed',
  },
  /** Not in the given PID namespace, or (host side) its innermost NSpid is not the planned container PID. */
  wrong_ns: {
    result: 'skipped',
    reason: 'wrong_namespace',
    text: 'wrong namespace: it is no longer in the container’s PID namespace',
  },
  /** Host side: PID 1 of its namespace (a container's init). */
  init: {
    result: 'skipped',
    reason: 'container_init',
    text: 'container init: it is PID 1 of the container; killing it would stop the whole container',
  },
  /** Its /proc entry (stat, status, ns/pid, fd) could not be read, so it could not be checked. */
  unreadable: {
    result: 'skipped',
    reason: 'unreadable',
    text: 'unreadable: its /proc entry could not be read, so it could not be checked',
  },
  /** The kernel refused the signal (EPERM). */
  eperm: { result: 'failed', reason: 'not_permitted', text: 'EPERM: Operation not permitted' },
  /** Any other error; the errno name (or the failing step) follows. */
  failed: { result: 'failed', reason: 'other', text: 'failed' },
} as const satisfies Record<string, Word>;

type SignalWord = keyof typeof SIGNAL_WORDS;

const NO_PIDFD_TEXT = 'no pidfd: the machine has neither perl nor python3 ≥ 3.9, so no race-free check was possible';

export type SignalSide = 'host' | 'container';
export type SignalName = 'TERM' | 'KILL';

export interface SignalTarget {
  /** PID in the namespace the command runs in (host PID on the host, container PID inside). */
  pid: number;
  /** `/proc/<pid>/stat` field 22 as planned. */
  startTimeTicks: number;
  /** Host side: the innermost NSpid it must still have (its container PID); null = not checked. */
  containerPid: number | null;
}

/** A process as the signal command on `side` names and checks it (see src/gpu/process-ref.ts). */
export function signalTargetOf(
  p: Pick<ProcessIdentity, 'hostPid' | 'containerPid' | 'startTimeTicks'>,
  side: SignalSide,
): SignalTarget {
  return {
    pid: pidIn(p, side),
    startTimeTicks: p.startTimeTicks,
    containerPid: side === 'host' ? p.containerPid : null,
  };
}

/** pidfd_open / pidfd_send_signal share one number on x86_64 and aarch64 (asm-generic table); other arches are refused. */
const SYSCALLS = {
  x86_64: { pidfdOpen: 434, pidfdSendSignal: 424 },
  aarch64: { pidfdOpen: 434, pidfdSendSignal: 424 },
} as const;

/** SYSCALLS as the Perl hash it reads: `x86_64 => [434, 424], …`. */
const PERL_SYSCALLS = Object.entries(SYSCALLS)
  .map(([arch, n]) => `${arch} => [${n.pidfdOpen}, ${n.pidfdSendSignal}]`)
  .join(', ');

const PERL = String.raw`use strict; use warnings; use POSIX ();
my ($side, $sig, $ns, @t) = @ARGV;
my %NO = (TERM => 15, KILL => 9); my $signo = $NO{$sig};
my $arch = (POSIX::uname())[4];
my %SYS = (${PERL_SYSCALLS});
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
`;

const PYTHON = String.raw`import errno, os, re, signal, sys
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
`;

/** Not race-free (a PID may change hands between the start-time read and `kill`): containers with neither perl nor python3 only. */
const SHELL_FALLBACK = [
  'echo "@method shell"',
  'one() {',
  '  st=$(cat "/proc/$1/stat" 2>/dev/null) || { echo gone; return; }',
  '  r=${st##*) }',
  '  # shellcheck disable=SC2086 # $r is the stat fields, split into words on purpose',
  '  set -- "$1" "$2" $r',
  '  p=$1; s=$2; shift 21',
  '  [ "$1" = "$s" ] || { echo reused; return; }',
  '  if [ "$NS" != 0 ]; then l=$(readlink "/proc/$p/ns/pid" 2>/dev/null) && [ "$l" != "pid:[$NS]" ] && { echo wrong_ns; return; }; fi',
  '  [ -r "/proc/$p/fd" ] || { echo unreadable; return; }',
  '  h=0',
  '  for f in /proc/"$p"/fd/*; do case $(readlink "$f" 2>/dev/null) in /dev/nvidia[0-9]|/dev/nvidia[0-9][0-9]|/dev/nvidia[0-9][0-9][0-9]) h=1;; esac; done',
  '  [ $h = 1 ] || { echo not_holding; return; }',
  '  if e=$(kill -s "$SIG" "$p" 2>&1); then echo sent; else case $e in *ermitted*) echo eperm;; *"No such"*) echo gone;; *) echo failed kill;; esac; fi',
  '}',
  'while [ $# -ge 3 ]; do echo "@sig $1 $(one "$1" "$2")"; shift 3; done',
  'echo @done',
].join('\n');

export const SIGNAL_SCRIPT = [
  'SIDE=$1 SIG=$2 NS=$3; shift 3',
  'case $SIG in TERM|KILL) ;; *) echo "@refused signal"; exit 2;; esac',
  'if command -v perl >/dev/null 2>&1; then',
  'perl - "$SIDE" "$SIG" "$NS" "$@" <<\'GPU_MEDIC_PERL\'',
  `${PERL}GPU_MEDIC_PERL`,
  'rc=$?; [ $rc = 3 ] || exit $rc',
  'fi',
  'if command -v python3 >/dev/null 2>&1; then',
  'python3 - "$SIDE" "$SIG" "$NS" "$@" <<\'GPU_MEDIC_PY\'',
  `${PYTHON}GPU_MEDIC_PY`,
  'rc=$?; [ $rc = 3 ] || exit $rc',
  'fi',
  'if [ "$SIDE" != container ]; then echo "@method none"; echo "@refused no pidfd (neither perl nor python3 >= 3.9)"; exit 4; fi',
  SHELL_FALLBACK,
].join('\n');

export const SIGNAL_SIDES: readonly SignalSide[] = ['host', 'container'];

function int(n: number, what: string, min: number): string {
  if (!Number.isSafeInteger(n) || n < min)
    throw new CodedError(
      ErrorCode.BadCommand,
      `${what} must be an integer ≥ ${min}, got ${String(n)}; nothing was run.`,
    );
  return String(n);
}

/** `pid:[4026532845]` → 4026532845; null for anything else. */
function pidNsInode(link: string | null): number | null {
  const m = link === null ? null : /^pid:\[(\d{1,15})\]$/.exec(link);
  return m?.[1] !== undefined ? Number(m[1]) : null;
}

/**
 * The signal command for these targets. `pidNs` is the target container's PID namespace as the
 * worker read it (`pid:[N]`); null only inside a container (its own /proc is its namespace).
 */
export function signalCommand(
  side: SignalSide,
  signal: SignalName,
  pidNs: string | null,
  targets: readonly SignalTarget[],
  o: { timeoutMs: number } & DestructiveIds,
): CommandSpec {
  if (targets.length === 0) throw new CodedError(ErrorCode.BadCommand, 'No PIDs to signal; nothing was run.');
  const inode = pidNsInode(pidNs);
  if (side === 'host' && inode === null)
    throw new CodedError(
      ErrorCode.BadCommand,
      'A host-side signal needs the target container’s PID namespace; nothing was run.',
    );
  const words = targets.flatMap((t) => {
    if (side === 'host' && t.containerPid === null)
      throw new CodedError(
        ErrorCode.BadCommand,
        'A host-side signal needs the container PID it must still have; nothing was run.',
      );
    return [
      int(t.pid, 'A PID', 1),
      int(t.startTimeTicks, 'A start time', 0),
      side === 'host' ? int(t.containerPid ?? 0, 'A container PID', 1) : '0',
    ];
  });
  const ns = String(inode ?? 0);
  return {
    argv: ['sh', '-c', SIGNAL_SCRIPT, 'sh', side, signal, ns, ...words],
    timeoutMs: o.timeoutMs,
    // The ids are the agent's (its checks against the envelopes, its audit line), not the script's.
    agent: { verb: 'signal', args: [side, signal, ns, o.incidentId, o.approvalId, ...words] },
  };
}

/** Whether an argv is the signal template (for tests and audits: the one command that signals). */
export function isSignalCommand(argv: readonly string[]): boolean {
  return argv.length >= 7 && argv[0] === 'sh' && argv[1] === '-c' && argv[2] === SIGNAL_SCRIPT;
}

// ---- reading what it printed (SIGNAL_GRAMMAR, SIGNAL_WORDS) ----

export type SignalOutcome =
  | { pid: number; result: 'sent' }
  | { pid: number; result: 'gone' }
  | { pid: number; result: 'skipped'; reason: SkipReason }
  | { pid: number; result: 'failed'; reason: 'not_permitted' | 'other'; message: string };

export interface SignalReport {
  /** `pidfd`: check and signal were one race-free act; `shell`: checked then killed (not race-free); null: no method line. */
  method: 'pidfd' | 'shell' | null;
  /** `@done` seen: every PID was answered. */
  complete: boolean;
  outcomes: SignalOutcome[];
}

const isWord = (w: string): w is SignalWord => Object.hasOwn(SIGNAL_WORDS, w);

/** One `@sig` line's outcome, from SIGNAL_WORDS; a word the table lacks is a failure, never a send. */
function outcomeOf(pid: number, word: string, detail: string | undefined): SignalOutcome {
  if (!isWord(word)) return { pid, result: 'failed', reason: 'other', message: `${word}${detail ? ` ${detail}` : ''}` };
  const w: Word = SIGNAL_WORDS[word];
  switch (w.result) {
    case 'sent':
    case 'gone':
      return { pid, result: w.result };
    case 'skipped':
      return { pid, result: 'skipped', reason: w.reason };
    case 'failed':
      return w.reason === 'not_permitted'
        ? { pid, result: 'failed', reason: 'not_permitted', message: 'Operation not permitted' }
        : { pid, result: 'failed', reason: 'other', message: `${word}${detail ? ` ${detail}` : ''}` };
  }
}

/** One outcome per PID asked for, in order (SIGNAL_GRAMMAR says what an unanswered PID is). */
export function parseSignalReport(pids: readonly number[], text: string): SignalReport {
  const asked = new Set(pids);
  const got = new Map<number, SignalOutcome>();
  const methods: Record<string, SignalReport['method']> = SIGNAL_GRAMMAR.methods;
  let method: SignalReport['method'] = null;
  let complete = false;
  let refused = false;
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\r$/, '');
    if (line === '@done') complete = true;
    else if (line.startsWith('@method ') && Object.hasOwn(methods, line.slice(8)))
      method = methods[line.slice(8)] ?? null;
    else if (line.startsWith('@refused')) refused = true;
    const m = SIGNAL_GRAMMAR.sig.exec(line);
    if (!m) continue;
    const pid = Number(m[1]);
    if (!asked.has(pid) || got.has(pid)) continue;
    got.set(pid, outcomeOf(pid, m[2] ?? '', m[3]));
  }
  const outcomes = pids.map((pid): SignalOutcome => {
    const o = got.get(pid);
    if (o) return o;
    if (refused) return { pid, result: 'skipped', reason: 'no_pidfd' };
    return { pid, result: 'failed', reason: 'other', message: 'no answer for this PID (output cut short?)' };
  });
  return { method, complete, outcomes };
}

/** Plain words for an outcome, as the log says it (SIGNAL_WORDS' `text`). */
export function outcomeText(o: SignalOutcome): string {
  if (o.result === 'sent' || o.result === 'gone') return SIGNAL_WORDS[o.result].text;
  if (o.result === 'failed') return o.reason === 'not_permitted' ? SIGNAL_WORDS.eperm.text : `failed: ${o.message}`;
  if (o.reason === 'no_pidfd') return NO_PIDFD_TEXT;
  const reason = o.reason;
  const w = Object.values(SIGNAL_WORDS).find((x: Word) => x.result === 'skipped' && x.reason === reason);
  return w?.text ?? reason;
}
