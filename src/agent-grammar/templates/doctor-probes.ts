import { AGENT_PROTOCOL } from '../arg-types.ts';
import type { CommandSpec } from '../command-spec.ts';

/**
 * The forced-key probes, which tell whether a stolen worker key could still open a shell, sent as they are
 * (Executor.probeLine) to every machine the worker's key logs into when it speaks to agents: the agent's
 * version; a verb no agent has, which a forced key must refuse (exit 126, `gpu-medic-agent: refused:`); and
 * what a shell would run, which a forced key must not run (`true` exiting 0 with no output means the key
 * still opens a shell).
 */
export const AGENT_PROBES = {
  version: `gpu-medic ${AGENT_PROTOCOL} version`,
  unknownVerb: `gpu-medic ${AGENT_PROTOCOL} 5000 host doctor-no-such-verb`,
  shell: 'true',
} as const;

/**
 * The doctor's fixed, read-only command templates. Every word is a constant, a vmid from the
 * inventory or a PID read from a machine; nothing signals, resets or writes anything. Each one
 * runs under the executor's `timeout -k`, exactly as unstick's commands do, so a missing
 * `timeout` shows up as every probe failing the same way.
 */
export type ProbeName = 'uname' | 'nvidia' | 'fuser' | 'perl' | 'python3' | 'proc' | 'pct' | 'ns' | 'clock';

const NVIDIA_FIELDS = ['index', 'uuid', 'driver_version', 'persistence_mode'] as const;

/**
 * Opens a pidfd on itself (Linux >= 5.3; x86_64 and arm64 both number pidfd_open 434) and closes
 * it: proves the interpreter and the kernel can do the race-free kill, signals nothing.
 */
const PERL_PIDFD =
  'my $fd = syscall(434, $$, 0); if ($fd < 0) { print "pidfd_open failed: $!\\n"; exit 1 } print "pidfd ok\\n";';
const PYTHON_PIDFD =
  'import os, signal\nfd = os.pidfd_open(os.getpid())\nos.close(fd)\nassert hasattr(signal, "pidfd_send_signal"), "no signal.pidfd_send_signal"\nprint("pidfd ok")';

/**
 * Who we are and whether /proc of another user (PID 1 is root's everywhere) can be read, plus the
 * /proc mount options (hidepid). One line per fact, `key value`.
 */
const PROC_SCRIPT = [
  'echo "uid $(id -u)"',
  'if cat /proc/1/stat >/dev/null 2>&1; then echo "pid1 readable"; else echo "pid1 hidden"; fi',
  // The last mount on /proc is the one in effect (a container's own /proc is stacked on its host's).
  "grep ' /proc proc ' /proc/self/mounts | tail -n 1 | sed 's/^/mount /'",
].join('; ');

export function probeSpecs(kind: 'host' | 'container', timeoutMs: number): Partial<Record<ProbeName, CommandSpec>> {
  const spec = (verb: string, argv: string[]): CommandSpec => ({
    argv,
    timeoutMs,
    maxOutputBytes: 64 * 1024,
    agent: { verb, args: [] },
  });
  const common = {
    uname: spec('probe-uname', ['uname', '-r']),
    nvidia: spec('probe-nvidia', ['nvidia-smi', `--query-gpu=${NVIDIA_FIELDS.join(',')}`, '--format=csv,noheader']),
    perl: spec('probe-perl', ['perl', '-e', PERL_PIDFD]),
    python3: spec('probe-python3', ['python3', '-c', PYTHON_PIDFD]),
    proc: spec('probe-proc', ['sh', '-c', PROC_SCRIPT]),
  };
  return kind === 'host'
    ? {
        ...common,
        pct: spec('pct-list', ['pct', 'list']),
        // The host's clock (s.ns since the epoch): the agent checks signed times against it.
        clock: spec('probe-clock', ['date', '+%s.%N']),
      }
    : {
        ...common,
        fuser: spec('probe-fuser', ['fuser', '-V']),
        ns: spec('probe-ns', ['readlink', '/proc/self/ns/pid']),
      };
}

/** On a host: the host PID of a container's init (`lxc-info -n <vmid> -p -H` prints the bare number). */
export function lxcInitPid(vmid: number, timeoutMs: number): CommandSpec {
  if (!Number.isInteger(vmid) || vmid <= 0) throw new RangeError(`vmid must be a positive integer, got ${vmid}`);
  return {
    argv: ['lxc-info', '-n', String(vmid), '-p', '-H'],
    timeoutMs,
    maxOutputBytes: 4096,
    agent: { verb: 'probe-init', args: [String(vmid)] },
  };
}

/** On a host: the PID namespace of a process, `pid:[4026531836]`. */
export function pidNamespaceOf(pid: number, timeoutMs: number): CommandSpec {
  if (!Number.isInteger(pid) || pid <= 0) throw new RangeError(`pid must be a positive integer, got ${pid}`);
  return {
    argv: ['readlink', `/proc/${pid}/ns/pid`],
    timeoutMs,
    maxOutputBytes: 4096,
    agent: { verb: 'probe-pidns', args: [String(pid)] },
  };
}

/** The most of each of root's key files the root-keys read prints (a cluster-wide file of 100 RSA keys is ~75 KiB). */
export const ROOT_KEYS_FILE_CAP = 131072;

/**
 * Root's two key files (sshd's default AuthorizedKeysFile for root), each after a marker line:
 * `@file <path>` then its public-key lines as `<line number>:<line>` (grep -n; comments, blank lines
 * and anything that is no key line are left out), `@cut <path>` when the file is longer than the cap,
 * `@absent <path>`, or `@unreadable <path>` (an agent that does not run as root, or /root it cannot
 * search); `@end` last. Fixed paths and no arguments: no caller word can name another file. On a
 * Proxmox node /root/.ssh/authorized_keys is a link to the cluster's /etc/pve/priv/authorized_keys,
 * which sshd reads and so is read here; nothing else under /etc/pve/priv is.
 */
const ROOT_KEYS_SCRIPT = [
  'd=/root/.ssh',
  'for f in "$d/authorized_keys" "$d/authorized_keys2"; do',
  'if [ -f "$f" ] && [ -r "$f" ]; then',
  'echo "@file $f"',
  `[ "$(head -c ${ROOT_KEYS_FILE_CAP + 1} "$f" | wc -c)" -le ${ROOT_KEYS_FILE_CAP} ] || echo "@cut $f"`,
  `head -c ${ROOT_KEYS_FILE_CAP} "$f" | grep -n -E '(^|[[:space:]])(ssh|ecdsa|sk)-[^[:space:]]+[[:space:]]+AAAA' || true`,
  'elif [ -e "$f" ]; then echo "@unreadable $f"',
  // Not there: absent only when this user could have seen it there (root can; another may not search /root).
  'elif [ -x "$d" ] || { [ -x /root ] && [ ! -e "$d" ]; }; then echo "@absent $f"',
  'else echo "@unreadable $f"; fi',
  'done',
  'echo @end',
].join('\n');

/**
 * On a host (or a `role=self` container's own agent): which lines of root's authorized_keys and
 * authorized_keys2 hold keys, so the doctor finds the worker's key there without logging in as root
 * (a failed root login counts against the worker's address in sshd's PerSourcePenalties and fail2ban).
 */
export function rootKeysRead(timeoutMs: number): CommandSpec {
  return {
    argv: ['sh', '-c', ROOT_KEYS_SCRIPT],
    timeoutMs,
    maxOutputBytes: 2 * ROOT_KEYS_FILE_CAP + 4096,
    agent: { verb: 'root-keys', args: [] },
  };
}
