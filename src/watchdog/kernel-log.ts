/**
 * What the watchdog reads on a host besides its snapshot (it warns before a GPU falls over for good), parsed,
 * pure: the NVIDIA lines of its kernel log since the last read (`journalctl -k`, or `dmesg` where there is no
 * journal), the state letters of its processes in uninterruptible sleep or zombie, and the GPUs' recovery
 * action. The commands are fixed templates (src/agent-grammar/templates/watch-commands.ts); their output is
 * machine text and is only matched here, never passed on to a shell.
 */
import { FIRST_READ_LOOKBACK_SEC } from '../agent-grammar/templates/watch-commands.ts';
import { parseXids, type XidEvent } from './xid.ts';

/** Where a host's kernel log was read up to, by the machine's own clocks. */
export type KernelLogCursor =
  | {
      source: 'journal';
      /** Timestamp (µs since the epoch, the journal's `short-unix`) of the last NVIDIA line seen; 0: none yet. */
      lastUs: number;
      /** The machine's clock (s) when it was last read: the next read starts a little before it. */
      readAtSec: number;
    }
  | {
      source: 'dmesg';
      /** `/proc/sys/kernel/random/boot_id`: a reboot starts a new ring buffer. */
      bootId: string;
      /** Seconds since boot of the last NVIDIA line seen (dmesg's `[  123.456789]`). */
      lastSec: number;
    };

/** The next journal read starts this long before the last read's clock (journald may log a line late). */
const JOURNAL_OVERLAP_SEC = 10;

/** The `--since=@N` of the next journal read (0: the script uses its own first-read lookback). */
export function journalSinceSec(c: KernelLogCursor | undefined): number {
  if (c === undefined || c.source !== 'journal') return 0;
  return Math.max(1, Math.floor(Math.max(c.lastUs / 1e6, c.readAtSec - JOURNAL_OVERLAP_SEC)));
}

export type KernelLogRead = { ok: true; xids: XidEvent[]; cursor: KernelLogCursor } | { ok: false; reason: string };

const JOURNAL_LINE = /^(\d{1,12})\.(\d{6})\s+\S+\s+kernel:\s?(.*)$/;
const DMESG_LINE = /^\[\s*(\d{1,10}\.\d{1,9})\]\s?(.*)$/;

/**
 * The kernel-log script's output (see `kernelLogScript`): `now <s>`, `boot <id> <uptime>`,
 * `source journal|dmesg`, then the NVIDIA lines. Only lines after the cursor are new.
 */
export function parseKernelLog(stdout: string, prev: KernelLogCursor | undefined): KernelLogRead {
  const lines = stdout.split('\n');
  let now: number | null = null;
  let bootId: string | null = null;
  let uptime: number | null = null;
  let source: 'journal' | 'dmesg' | null = null;
  const body: string[] = [];
  for (const line of lines) {
    if (source !== null) {
      if (line.trim() !== '') body.push(line);
      continue;
    }
    const n = /^now (\d{1,12})$/.exec(line);
    if (n) now = Number(n[1]);
    const b = /^boot ([0-9a-f-]{0,64}) ?(\d{1,10}(?:\.\d{1,3})?)?$/.exec(line);
    if (b) {
      bootId = b[1] === '' ? null : (b[1] ?? null);
      uptime = b[2] === undefined ? null : Number(b[2]);
    }
    if (line === 'source none')
      return { ok: false, reason: 'neither journalctl -k nor dmesg could be read by this login (dmesg_restrict?)' };
    const s = /^source (journal|dmesg)$/.exec(line);
    if (s) source = s[1] === 'journal' ? 'journal' : 'dmesg';
  }
  if (source === null || now === null) return { ok: false, reason: 'the kernel-log read gave no source line' };
  if (source === 'journal') {
    const after = prev?.source === 'journal' ? prev.lastUs : 0;
    let last = after;
    const fresh: string[] = [];
    for (const l of body) {
      const m = JOURNAL_LINE.exec(l);
      if (!m) continue;
      const us = Number(m[1]) * 1e6 + Number(m[2]);
      if (us <= after) continue;
      last = Math.max(last, us);
      fresh.push(m[3] ?? '');
    }
    return { ok: true, xids: parseXids(fresh.join('\n')), cursor: { source: 'journal', lastUs: last, readAtSec: now } };
  }
  if (bootId === null) return { ok: false, reason: 'the kernel-log read could not tell the boot (no boot_id)' };
  const sameBoot = prev?.source === 'dmesg' && prev.bootId === bootId;
  // First read: the last few minutes only; after a reboot: the whole new ring buffer.
  const after = sameBoot ? prev.lastSec : prev === undefined ? Math.max(0, (uptime ?? 0) - FIRST_READ_LOOKBACK_SEC) : 0;
  let last = sameBoot ? prev.lastSec : 0;
  const fresh: string[] = [];
  for (const l of body) {
    const m = DMESG_LINE.exec(l);
    if (!m) continue;
    const sec = Number(m[1]);
    if (sec <= after) continue;
    last = Math.max(last, sec);
    fresh.push(m[2] ?? '');
  }
  return {
    ok: true,
    xids: parseXids(fresh.join('\n')),
    cursor: { source: 'dmesg', bootId, lastSec: Math.max(last, after) },
  };
}

/**
 * The holder-state script's output: `<pid> <state>` per thread in D or Z state (the PID of the
 * process it belongs to), then `end`. A process counts as Z when its leader is a zombie, else as D
 * when any of its threads sleeps uninterruptibly. Null when the script did not finish.
 */
export function parseStuckProcesses(stdout: string): Record<number, 'D' | 'Z'> | null {
  const out: Record<number, 'D' | 'Z'> = {};
  let ended = false;
  for (const line of stdout.split('\n')) {
    if (line === 'end') {
      ended = true;
      continue;
    }
    const m = /^(\d{1,9}) ([DZ])$/.exec(line);
    if (!m) continue;
    const pid = Number(m[1]);
    const st = m[2] === 'Z' ? 'Z' : 'D';
    if (out[pid] !== 'Z') out[pid] = st;
  }
  return ended ? out : null;
}

export interface RecoveryAction {
  /** GPU index (host numbering). */
  gpu: number;
  uuid: string | null;
  /** The driver's value (machine text, validated to a short plain word sequence). */
  action: string;
}

export type RecoveryActionsRead = { supported: true; actions: RecoveryAction[] } | { supported: false };

/**
 * `nvidia-smi --query-gpu=index,uuid,gpu_recovery_action --format=csv,noheader,nounits`. A driver that
 * does not know the field answers `Field "gpu_recovery_action" is not a valid field to query.`: not
 * supported there, which is no failure. Null when the answer is anything else (the GPU query itself
 * says what is wrong with nvidia-smi).
 */
export function parseRecoveryActions(code: number | null, stdout: string): RecoveryActionsRead | null {
  if (code !== 0) return /is not a valid field to query/.test(stdout) ? { supported: false } : null;
  const actions: RecoveryAction[] = [];
  for (const line of stdout.split('\n')) {
    if (line.trim() === '') continue;
    const f = line.split(',').map((x) => x.trim());
    const gpu = Number(f[0]);
    const action = f[2] ?? '';
    if (f.length !== 3 || !Number.isInteger(gpu) || !/^[A-Za-z0-9 [\]/_-]{1,40}$/.test(action)) return null;
    const uuid = /^GPU-[0-9a-fA-F-]{8,64}$/.test(f[1] ?? '') ? (f[1] ?? null) : null;
    actions.push({ gpu, uuid, action });
  }
  return { supported: true, actions };
}
