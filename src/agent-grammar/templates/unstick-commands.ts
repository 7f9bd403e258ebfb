import { CodedError, ErrorCode } from '../../errors.ts';
import type { ProcReading } from '../../gpu/holders.ts';
import { parsePidNsLink } from '../../gpu/holders.ts';
import { parseProcStat } from '../../gpu/parse/parse-machine-files.ts';
import type { DestructiveIds } from '../arg-types.ts';
import type { CommandSpec } from '../command-spec.ts';
import { APP_FIELDS, GPU_FIELDS } from './snapshot-commands.ts';
import { SIGNAL_SCRIPT, SIGNAL_SIDES, type SignalName } from './signal.ts';

/**
 * Fixed command templates of `/gpu unstick`. Every argv word is a constant of this file or a
 * decimal integer read from a machine (a PID, a vmid, a GPU index): nothing a user typed can
 * reach a command, and `assertSafeArgv` proves it before anything runs.
 */

export interface TemplateOptions {
  timeoutMs: number;
}

/** Signals are sent only by the check-and-signal template of `./signal/` (the one place that signals). */
export type Signal = SignalName;

/** Integers only, positive, safe: a PID of 0 or -1 would signal a process group or everything. */
function pidWords(pids: readonly number[]): string[] {
  if (pids.length === 0) throw new CodedError(ErrorCode.BadCommand, 'No PIDs to signal; nothing was run.');
  return pids.map((p) => {
    if (!Number.isSafeInteger(p) || p <= 0)
      throw new CodedError(
        ErrorCode.BadCommand,
        `A PID must be a positive integer, got ${String(p)}; nothing was run.`,
      );
    return String(p);
  });
}

/** Bytes of a command line the reading template prints: one more than this marks it cut. */
const CMDLINE_CAP_BYTES = 8192;
/** How many parents above each PID the reading template names (launcher, its shell, …). */
const PARENT_LEVELS = 4;

/**
 * The one reading template, for a list of PIDs in the namespace it runs in (host or container).
 * PIDs are positional parameters of a constant script, never spliced into it. stat and cmdline
 * are hex-encoded because comm and cmdline may hold spaces, `)` or newlines. Identity fields
 * for every PID come first and cmdline last: reading the cmdline of a hung process can block,
 * and it must not hide the identities. Then each PID's parents, nearest first, up to
 * PARENT_LEVELS: a TP rank's own title is often only `sglang::scheduler_TP0`, the launcher above
 * it carries the arguments (root causes, src/gpu/root-cause.ts). The walk follows `PPid:` (an
 * integer the kernel wrote, checked to be digits) and stops below PID 1 and below a container's
 * init (NSpid ending in 1), so it never leaves the container it started in; a parent already
 * named (8 ranks share one launcher) is named once, under the first PID that reached it, and the
 * walk stops there. Command lines are read up to CMDLINE_CAP_BYTES + 1 bytes. `@done` proves the output is complete.
 * `@cgroup` is `/proc/<pid>/cgroup`, hex-encoded (a cgroup's name may hold any byte but `/`):
 * a host process is a container's only when its cgroup is the container's `lxc/<vmid>` too.
 */
export const READ_PROCS_SCRIPT = [
  'for p in "$@"; do',
  'echo "@pid $p"',
  'echo "@stat $(od -An -v -tx1 "/proc/$p/stat" 2>/dev/null | tr -d " \\n")"',
  'grep -E "^(NSpid|Uid):" "/proc/$p/status" 2>/dev/null | sed "s/^/@status /"',
  'echo "@ns $(readlink "/proc/$p/ns/pid" 2>/dev/null)"',
  'echo "@cgroup $(od -An -v -tx1 "/proc/$p/cgroup" 2>/dev/null | tr -d " \\n")"',
  'done',
  'for p in "$@"; do',
  `echo "@cmdline $p $(head -c ${CMDLINE_CAP_BYTES + 1} "/proc/$p/cmdline" 2>/dev/null | od -An -v -tx1 | tr -d " \\n")"`,
  'done',
  's=" "',
  'for p in "$@"; do',
  'c=$p; n=0',
  `while [ $n -lt ${PARENT_LEVELS} ]; do`,
  'q=$(sed -n "s/^PPid:[[:space:]]*//p" "/proc/$c/status" 2>/dev/null)',
  'case "$q" in ""|*[!0-9]*|0|1) break;; esac',
  'case "$s" in *" $q "*) break;; esac',
  '[ "$(sed -n "s/^NSpid:.*[[:space:]]//p" "/proc/$q/status" 2>/dev/null)" = 1 ] && break',
  's="$s$q "',
  `echo "@parent $p $q $(head -c ${CMDLINE_CAP_BYTES + 1} "/proc/$q/cmdline" 2>/dev/null | od -An -v -tx1 | tr -d " \\n")"`,
  'c=$q; n=$((n+1))',
  'done',
  'done',
  'echo @done',
].join('\n');

export function readProcs(pids: readonly number[], o: TemplateOptions): CommandSpec {
  const words = pidWords(pids);
  return {
    argv: ['sh', '-c', READ_PROCS_SCRIPT, 'sh', ...words],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'procs', args: words },
  };
}

/** The container's init PID on the host: `lxc-info -n <vmid> -p` → `PID:  12345`. */
export function containerInitPid(vmid: number, o: TemplateOptions): CommandSpec {
  if (!Number.isSafeInteger(vmid) || vmid <= 0)
    throw new CodedError(
      ErrorCode.BadCommand,
      `A container id must be a positive integer, got ${String(vmid)}; nothing was run.`,
    );
  return {
    argv: ['lxc-info', '-n', String(vmid), '-p'],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'ct-init', args: [String(vmid)] },
  };
}

/** `GPU-` + 8-4-4-4-12 hex, as nvidia-smi prints a UUID. */
export const GPU_UUID = /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A GPU named by UUID (`nvidia-smi -i` accepts one): an index names whatever GPU has it at run time. */
function gpuUuidWord(uuid: string): string {
  if (!GPU_UUID.test(uuid))
    throw new CodedError(
      ErrorCode.BadCommand,
      `A GPU must be named by its UUID, got ${JSON.stringify(uuid.slice(0, 60))}; nothing was run.`,
    );
  return uuid;
}

/** The host's own record of one GPU, by UUID: proves it is still there (and at which index) right before a reset. */
export function hostGpuByUuid(uuid: string, o: TemplateOptions): CommandSpec {
  return {
    argv: [
      'nvidia-smi',
      `--query-gpu=${GPU_FIELDS.join(',')}`,
      '--format=csv,noheader,nounits',
      '-i',
      gpuUuidWord(uuid),
    ],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'gpu', args: [uuid] },
  };
}

/** Compute apps of one host GPU, to prove nothing anywhere holds it before a reset. */
export function hostGpuApps(uuid: string, o: TemplateOptions): CommandSpec {
  return {
    argv: [
      'nvidia-smi',
      `--query-compute-apps=${APP_FIELDS.join(',')}`,
      '--format=csv,noheader,nounits',
      '-i',
      gpuUuidWord(uuid),
    ],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'gpu-apps', args: [uuid] },
  };
}

/** `0, Enabled`: whether persistence must be switched off for the reset and back on after. */
export function persistenceMode(uuid: string, o: TemplateOptions): CommandSpec {
  return {
    argv: ['nvidia-smi', '--query-gpu=index,persistence_mode', '--format=csv,noheader', '-i', gpuUuidWord(uuid)],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'pm-read', args: [uuid] },
  };
}

/** Destructive: carries the incident and approval ids (the agent's checks and audit line; not passed to nvidia-smi). */
export function setPersistence(uuid: string, on: boolean, o: TemplateOptions & DestructiveIds): CommandSpec {
  const bit = on ? '1' : '0';
  return {
    argv: ['nvidia-smi', '-pm', bit, '-i', gpuUuidWord(uuid)],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'persistence', args: [bit, uuid, o.incidentId, o.approvalId] },
  };
}

/** Host only: a container is refused (`Resetting GPU ... is not supported.`), and must never be asked. Destructive (ids as setPersistence). */
export function gpuReset(uuid: string, o: TemplateOptions & DestructiveIds): CommandSpec {
  return {
    argv: ['nvidia-smi', '--gpu-reset', '-i', gpuUuidWord(uuid)],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'reset', args: [uuid, o.incidentId, o.approvalId] },
  };
}

/** The container's Proxmox configuration on its host (`devN: /dev/nvidiaM`: which GPUs it was given). */
export function containerConfig(vmid: number, o: TemplateOptions): CommandSpec {
  if (!Number.isSafeInteger(vmid) || vmid <= 0)
    throw new CodedError(
      ErrorCode.BadCommand,
      `A container id must be a positive integer, got ${String(vmid)}; nothing was run.`,
    );
  return {
    argv: ['pct', 'config', String(vmid)],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'pct-config', args: [String(vmid)] },
  };
}

/** The host's full GPU report: the device minor (`/dev/nvidia<minor>`) of each GPU, by UUID. */
export function hostGpuReport(o: TemplateOptions): CommandSpec {
  return {
    argv: ['nvidia-smi', '-q', '-x'],
    timeoutMs: o.timeoutMs,
    maxOutputBytes: 8 * 1024 * 1024,
    agent: { verb: 'gpu-report', args: [] },
  };
}

/** Every constant word the templates above may use. */
export const CONSTANT_WORDS: ReadonlySet<string> = new Set([
  'TERM',
  'KILL',
  SIGNAL_SCRIPT,
  ...SIGNAL_SIDES,
  'sh',
  '-c',
  READ_PROCS_SCRIPT,
  'lxc-info',
  '-n',
  '-p',
  'nvidia-smi',
  `--query-compute-apps=${APP_FIELDS.join(',')}`,
  '--format=csv,noheader,nounits',
  '--format=csv,noheader',
  '--query-gpu=index,persistence_mode',
  '-i',
  '-pm',
  '--gpu-reset',
  `--query-gpu=${GPU_FIELDS.join(',')}`,
  'pct',
  'config',
  '-q',
  '-x',
]);

/** Refuses any argv with a word that is neither a template constant nor a decimal integer. */
export function assertSafeArgv(argv: readonly string[]): void {
  for (const w of argv) {
    if (CONSTANT_WORDS.has(w) || /^(0|[1-9]\d{0,14})$/.test(w) || GPU_UUID.test(w)) continue;
    throw new CodedError(
      ErrorCode.BadCommand,
      `A command word is not from a fixed template: ${JSON.stringify(w.slice(0, 40))}; nothing was run.`,
    );
  }
}

// ---- parsers of what these templates print ----

function hexToBytes(hex: string): Buffer | null {
  if (hex.length % 2 !== 0 || !/^[0-9a-f]*$/.test(hex)) return null;
  return Buffer.from(hex, 'hex');
}

export interface ProcReadings {
  readings: ProcReading[];
  /** False when `@done` is missing: the read was cut short (timeout, output cap); missing fields are not "gone". */
  complete: boolean;
}

/**
 * NUL-separated argv as one line, NULs as spaces (setproctitle() leaves trailing NULs or spaces).
 * One cut at the cap keeps only whole arguments, or, when the first one alone is longer, the cut
 * text with `…`: a number cut in half must never read as a smaller one.
 */
function cmdlineText(bytes: Buffer): string {
  let b = bytes;
  let mark = '';
  if (b.length > CMDLINE_CAP_BYTES) {
    b = b.subarray(0, CMDLINE_CAP_BYTES);
    const lastNul = b.lastIndexOf(0);
    if (lastNul > 0) b = b.subarray(0, lastNul);
    else mark = '…';
  }
  return b.toString('utf8').replace(/\0+$/, '').replace(/\0/g, ' ').trimEnd() + mark;
}

/** Output of `readProcs`, one reading per PID asked for, in order. */
export function parseProcReadings(text: string): ProcReadings {
  const byPid = new Map<number, ProcReading>();
  let complete = false;
  let current: ProcReading | null = null;
  const int = (t: string): number | null => (/^\d{1,15}$/.test(t) ? Number(t) : null);
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\r$/, '');
    const sp = line.indexOf(' ');
    const tag = sp < 0 ? line : line.slice(0, sp);
    const rest = sp < 0 ? '' : line.slice(sp + 1);
    if (tag === '@done') complete = true;
    else if (tag === '@pid') {
      const pid = int(rest);
      if (pid === null) continue;
      current = byPid.get(pid) ?? { pid, stat: null, nsPids: null, uid: null, pidNs: null, cmdline: null };
      byPid.set(pid, current);
    } else if (tag === '@stat' && current) {
      const bytes = hexToBytes(rest.trim());
      if (bytes && bytes.length > 0) {
        const st = parseProcStat(bytes.toString('latin1').replace(/\n$/, ''));
        if (st.ok && st.value.pid === current.pid) current.stat = st.value;
      }
    } else if (tag === '@status' && current) {
      const m = /^(NSpid|Uid):\s+(.*)$/.exec(rest);
      const values = m?.[2]?.trim().split(/\s+/).map(int);
      if (!m || !values || values.some((v) => v === null)) continue;
      const nums = values.filter((v): v is number => v !== null);
      if (m[1] === 'NSpid') current.nsPids = nums.length > 0 ? nums : null;
      else current.uid = nums[0] ?? null;
    } else if (tag === '@ns' && current) {
      current.pidNs = parsePidNsLink(rest);
    } else if (tag === '@cgroup' && current) {
      const bytes = hexToBytes(rest.trim());
      if (bytes && bytes.length > 0) current.cgroup = bytes.toString('utf8');
    } else if (tag === '@cmdline') {
      const [pidText, hex = ''] = rest.split(' ');
      const r = byPid.get(int(pidText ?? '') ?? -1);
      const bytes = hexToBytes(hex);
      if (!r || bytes === null || hex === '') continue;
      r.cmdline = cmdlineText(bytes);
    } else if (tag === '@parent') {
      const [pidText, parentText, hex = ''] = rest.split(' ');
      const r = byPid.get(int(pidText ?? '') ?? -1);
      const parent = int(parentText ?? '');
      const bytes = hexToBytes(hex);
      if (!r || parent === null || parent <= 1 || bytes === null) continue;
      const parents = r.parents ?? [];
      if (parents.length >= PARENT_LEVELS || parents.some((x) => x.pid === parent)) continue;
      parents.push({ pid: parent, cmdline: cmdlineText(bytes) });
      r.parents = parents;
    }
  }
  return { readings: [...byPid.values()], complete };
}

/** `lxc-info -n <vmid> -p` → the init's host PID, or null (container not running prints nothing). */
export function parseLxcInitPid(text: string): number | null {
  const m = /^PID:\s+(\d{1,15})\s*$/m.exec(text);
  return m?.[1] !== undefined && Number(m[1]) > 0 ? Number(m[1]) : null;
}

/**
 * Host device minors a container's config passes to it: `devN: /dev/nvidiaM[,opts]` or
 * `devN: path=/dev/nvidiaM,...` (PVE 8.1+), and `lxc.mount.entry: /dev/nvidiaM dev/nvidiaM ...`
 * (the older bind-mount recipe). Only the current config counts: `[snapshot]` sections are not it.
 */
export function parsePctConfigGpuMinors(text: string): number[] {
  const out: number[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('[')) break;
    const m =
      /^dev\d+:\s*(?:path=)?\/dev\/nvidia(\d{1,4})(?:,|$)/.exec(line) ??
      /^lxc\.mount\.entry:\s*\/dev\/nvidia(\d{1,4})\s/.exec(line);
    const n = m?.[1] !== undefined ? Number(m[1]) : null;
    if (n !== null && !out.includes(n)) out.push(n);
  }
  return out;
}

/** `nvidia-smi -q -x` → each `<gpu id="bus">`'s UUID and `<minor_number>` (`N/A` → null). */
export function parseXmlGpuMinors(
  xml: string,
): Array<{ uuid: string | null; busId: string | null; minor: number | null }> {
  const out: Array<{ uuid: string | null; busId: string | null; minor: number | null }> = [];
  const blocks = xml.split(/<gpu id="/).slice(1);
  for (const b of blocks) {
    const busId = /^([^"]{1,32})"/.exec(b)?.[1] ?? null;
    const uuid = /<uuid>\s*(GPU-[0-9A-Fa-f-]{36})\s*<\/uuid>/.exec(b)?.[1] ?? null;
    const minorText = /<minor_number>\s*([^<]*?)\s*<\/minor_number>/.exec(b)?.[1];
    const minor = minorText !== undefined && /^\d{1,4}$/.test(minorText) ? Number(minorText) : null;
    out.push({ uuid, busId, minor });
  }
  return out;
}

/** `0, Enabled` → true; `Disabled` → false; anything else → null (unknown: treat as on, restore after). */
export function parsePersistenceMode(text: string): boolean | null {
  const m = /^\s*\d+,\s*(Enabled|Disabled)\s*$/m.exec(text);
  if (!m) return null;
  return m[1] === 'Enabled';
}
