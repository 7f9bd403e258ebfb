/**
 * The watchdog's judgement (it warns before a user has to ask), pure: from the alert state stored after the
 * last read of a machine and a new reading, the next state and the alert changes to show (raise, update,
 * clear). Deterministic and idempotent: judging the same reading against the state it produced changes
 * nothing, so a worker that restarts between storing the state and posting re-derives the same changes and
 * posts nothing twice (the caller stores state and changes together).
 *
 * Conditions, each keyed by machine (and GPU where it has one):
 * - ghost_memory: GPU memory no process anywhere on the host holds (host view: used minus every
 *   compute app on that GPU) of at least `ghostMinMiB`, raised once it lasted `ghostMinutes`;
 * - holder_stuck: a GPU holder in uninterruptible sleep (D) or a zombie (Z) while holding memory;
 * - ram_high: host RAM at or above `ramPct` % (hosts' readings only), with the root causes the holders' command lines show
 *   (`snapshot.rootCauses`, host-RAM kinds) when the read had them;
 * - nvidia_smi_failing: the GPU query hung, or the driver failed as a whole;
 * - gpu_error: one GPU answered with an error instead of numbers;
 * - gpus_missing: fewer GPUs than last seen;
 * - unreachable: the machine could not be read at all;
 * - xid: an Xid line in the kernel log since the last read, with what it means; it clears after
 *   `xidQuietMinutes` without another;
 * - recovery_action: the driver reports a recovery action other than None for a GPU
 *   (`--query-gpu=gpu_recovery_action`, newer drivers), with what it asks for.
 * A reading only clears the kinds it could observe (an unreachable machine clears nothing but
 * `unreachable`). Sentences hold numbers, PIDs, GPU indexes and our own words, never machine text.
 * The watchdog never signals or resets anything: it only judges.
 */
import type { ErrorCode } from '../errors.ts';
import { HOST_RAM_CAUSES, snapshotRootCauses } from '../gpu/snapshot-causes.ts';
import type { MachineSnapshot } from '../gpu/snapshot.ts';
import type { KernelLogCursor } from './kernel-log.ts';
import { recoveryActionAdvice, type XidEvent, xidWords } from './xid.ts';
import { countRounded } from '../text/units.ts';

/** The watchdog's alert kinds: the one list the judge, the round store, the metrics and Alertmanager's map read. */
export const CONDITION_KINDS = [
  'ghost_memory',
  'holder_stuck',
  'ram_high',
  'nvidia_smi_failing',
  'gpu_error',
  'gpus_missing',
  'unreachable',
  'xid',
  'recovery_action',
] as const;
export type ConditionKind = (typeof CONDITION_KINDS)[number];

/** What an alert message can be about: the watchdog's kinds, or an Alertmanager alert whose name maps to none. */
export type AlertKind = ConditionKind | 'external';

export interface WatchSettings {
  ghostMinutes: number;
  ghostMinMiB: number;
  ramPct: number;
  xidQuietMinutes: number;
}

export const DEFAULT_WATCH_SETTINGS: WatchSettings = {
  ghostMinutes: 10,
  ghostMinMiB: 1024,
  ramPct: 90,
  xidQuietMinutes: 60,
};

export type MachineReading =
  | {
      machineId: string;
      at: number;
      ok: true;
      snapshot: MachineSnapshot;
      /** `/proc/<pid>/stat` state letter of the GPU holders (host PIDs), when read. */
      holderStates?: Readonly<Record<number, string>>;
      /** Xid lines since the last read. */
      xids?: readonly XidEvent[];
      /** Each GPU's `gpu_recovery_action`, where the driver reports it. */
      recoveryActions?: ReadonlyArray<{ gpu: number; uuid: string | null; action: string }>;
    }
  | { machineId: string; at: number; ok: false; code: ErrorCode };

export interface Alert {
  key: string;
  kind: AlertKind;
  machineId: string;
  /** GPU index (host numbering) when the condition is about one GPU. */
  gpu: number | null;
  /** That GPU's UUID when the reading had it (the condition's key, src/watchdog/condition.ts). */
  gpuUuid?: string | null;
  /** When the condition was first seen in this episode (ms). */
  since: number;
  /** When it was raised (shown); null while it waits (ghost memory younger than ghostMinutes, or snoozed). */
  raisedAt: number | null;
  sentence: string;
  lastSeenAt: number;
}

export interface WatchState {
  alerts: Record<string, Alert>;
  /** Most GPUs seen per machine (for gpus_missing). */
  gpuCount: Record<string, number>;
  /** When the reading this state was judged from was taken (ms): an older reading is not judged against it. */
  lastReadingAt?: number;
  /** Where the host's kernel log was read up to (the watchdog's worker keeps it; the judge passes it on). */
  kernelLog?: KernelLogCursor;
}

export const EMPTY_WATCH_STATE: WatchState = { alerts: {}, gpuCount: {} };

export type AlertChange = { type: 'raise' | 'update'; alert: Alert } | { type: 'clear'; alert: Alert; at: number };

/** Snoozes by `machineId` or `machineId/gpuIndex`, until (ms). */
export type Snoozes = Readonly<Record<string, number>>;

interface Seen {
  key: string;
  kind: ConditionKind;
  gpu: number | null;
  gpuUuid?: string | null;
  sentence: string;
}

const GiB = 2 ** 30;

function observedKinds(r: MachineReading): Set<AlertKind> {
  if (!r.ok) return new Set(['unreachable']);
  const kinds: AlertKind[] = ['unreachable', 'nvidia_smi_failing', 'gpu_error', 'ram_high'];
  const s = r.snapshot;
  if (s.gpuError === null && s.view === 'host') kinds.push('ghost_memory', 'gpus_missing');
  if (r.holderStates !== undefined) kinds.push('holder_stuck');
  if (r.recoveryActions !== undefined) kinds.push('recovery_action');
  return new Set(kinds);
}

function conditionsOf(r: MachineReading, prev: WatchState, settings: WatchSettings): Seen[] {
  const m = r.machineId;
  if (!r.ok) {
    if (r.code === 'command_timeout')
      return [
        {
          key: `${m}/nvidia_smi_failing`,
          kind: 'nvidia_smi_failing',
          gpu: null,
          sentence: 'nvidia-smi did not answer within the command timeout (a wedged driver often hangs it).',
        },
      ];
    return [
      {
        key: `${m}/unreachable`,
        kind: 'unreachable',
        gpu: null,
        sentence: `the watchdog could not read it (${r.code.replace(/[^a-z_]/g, '')}).`,
      },
    ];
  }
  const s = r.snapshot;
  const out: Seen[] = [];
  if (s.gpuError !== null) {
    const gpuWide = s.gpus.length > 0 || s.gpuError.busId !== null;
    out.push(
      gpuWide
        ? {
            key: `${m}/gpu_error/${s.gpuError.busId ?? '?'}`,
            kind: 'gpu_error',
            gpu: null,
            sentence: `a GPU answers an error instead of numbers (${s.gpuError.kind.replace(/[^a-z_]/g, '')}).`,
          }
        : {
            key: `${m}/nvidia_smi_failing`,
            kind: 'nvidia_smi_failing',
            gpu: null,
            sentence: `nvidia-smi fails for every GPU (${s.gpuError.kind.replace(/[^a-z_]/g, '')}).`,
          },
    );
  }
  // Host RAM is the host's condition: judged on its own reading only. A container's `free` shows
  // its host's RAM or (lxcfs) its own limit; either way the host's alert is the one to act on,
  // and a second alert per container would repeat it. (One raised before still clears: observed.)
  if (s.view === 'host' && s.ram && s.ram.totalBytes > 0) {
    const pct = Math.round((s.ram.usedBytes / s.ram.totalBytes) * 100);
    // Why, when the holders' command lines say so (root-cause.ts: numbers and flag names only).
    const why = snapshotRootCauses(s, HOST_RAM_CAUSES)
      .map((c) => ` Why: ${c.sentence}`)
      .join('');
    if (pct >= settings.ramPct)
      out.push({
        key: `${m}/ram_high`,
        kind: 'ram_high',
        gpu: null,
        sentence: `host RAM ${pct} % used (${countRounded(s.ram.usedBytes / GiB)} of ${countRounded(s.ram.totalBytes / GiB)} GiB).${why}`,
      });
  }
  if (s.view === 'host' && s.gpuError === null) {
    for (const g of s.gpus) {
      if (g.memoryUsedMiB === null || g.index === null) continue;
      const held = s.processes
        .filter((p) => p.gpuIndex === g.index || (p.gpuUuid !== null && p.gpuUuid === g.uuid))
        .reduce((a, p) => a + (p.usedMiB ?? 0), 0);
      const ghost = g.memoryUsedMiB - held;
      if (ghost >= settings.ghostMinMiB)
        out.push({
          key: `${m}/ghost_memory/${g.uuid ?? g.index}`,
          kind: 'ghost_memory',
          gpu: g.index,
          gpuUuid: g.uuid,
          sentence: `GPU ${g.index}: ${countRounded(ghost)} MiB in use that no process on the host holds.`,
        });
    }
    const most = prev.gpuCount[m] ?? 0;
    if (s.gpus.length < most)
      out.push({
        key: `${m}/gpus_missing`,
        kind: 'gpus_missing',
        gpu: null,
        sentence: `${s.gpus.length} GPUs answer, ${most} were seen before: a GPU may have fallen off the bus.`,
      });
  }
  if (r.holderStates !== undefined) {
    for (const p of s.processes) {
      const st = r.holderStates[p.pid];
      if (st !== 'D' && st !== 'Z') continue;
      const what =
        st === 'D'
          ? 'in uninterruptible sleep (D): signals wait until the kernel call returns'
          : 'a zombie (Z): it is dead, but its memory is not yet released';
      out.push({
        key: `${m}/holder_stuck/${p.pid}/${p.gpuIndex ?? '?'}`,
        kind: 'holder_stuck',
        gpu: p.gpuIndex,
        gpuUuid: p.gpuUuid,
        sentence: `host PID ${p.pid} holds ${countRounded(p.usedMiB ?? 0)} MiB on GPU ${p.gpuIndex ?? '?'} and is ${what}.`,
      });
    }
  }
  for (const ra of r.recoveryActions ?? []) {
    const value = ra.action.trim();
    if (value === 'None' || value === '[N/A]' || value === 'N/A' || value === '') continue;
    const advice = recoveryActionAdvice(value);
    out.push({
      key: `${m}/recovery_action/${ra.uuid ?? ra.gpu}`,
      kind: 'recovery_action',
      gpu: ra.gpu,
      gpuUuid: ra.uuid,
      sentence: `GPU ${ra.gpu}: ${advice ?? "the driver reports a recovery action gpu-medic does not know: see `nvidia-smi -q` on the host and NVIDIA's documentation."}`,
    });
  }
  for (const x of r.xids ?? []) {
    const pci = x.pci.replace(/[^0-9a-f:.]/g, '');
    const onGpu = s.gpus.find((g) => g.busId !== null && busDevice(g.busId) === busDevice(pci));
    const gpu = onGpu?.index ?? null;
    out.push({
      key: `${m}/xid/${x.xid}/${pci}`,
      kind: 'xid',
      gpu,
      gpuUuid: onGpu?.uuid ?? null,
      sentence: `Xid ${x.xid} on PCI ${pci}${gpu === null ? '' : ` (GPU ${gpu})`}: ${xidWords(x.xid)}`,
    });
  }
  return out;
}

/** `bus:device` of a PCI address, lower case: `00000000:0B:00.0` and `0000:0b:00` both give `0b:00`. */
function busDevice(pci: string): string | null {
  return /([0-9a-f]{2}):([0-9a-f]{2})(?:\.[0-7])?$/.exec(pci.toLowerCase())?.slice(1, 3).join(':') ?? null;
}

function snoozed(a: Pick<Alert, 'machineId' | 'gpu'>, snoozes: Snoozes, now: number): boolean {
  const m = snoozes[a.machineId] ?? 0;
  const g = a.gpu === null ? 0 : (snoozes[`${a.machineId}/${a.gpu}`] ?? 0);
  return Math.max(m, g) > now;
}

/** The next state and the changes to show, for one machine's reading. */
export function judge(
  prev: WatchState,
  r: MachineReading,
  settings: WatchSettings = DEFAULT_WATCH_SETTINGS,
  snoozes: Snoozes = {},
): { next: WatchState; changes: AlertChange[] } {
  const now = r.at;
  const seen = conditionsOf(r, prev, settings);
  const observed = observedKinds(r);
  const alerts: Record<string, Alert> = { ...prev.alerts };
  const changes: AlertChange[] = [];
  const seenKeys = new Set(seen.map((c) => c.key));

  for (const c of seen) {
    const old = alerts[c.key];
    const since = old?.since ?? now;
    const due = c.kind !== 'ghost_memory' || now - since >= settings.ghostMinutes * 60_000;
    const quiet = snoozed({ machineId: r.machineId, gpu: c.gpu }, snoozes, now);
    const base: Alert = {
      key: c.key,
      kind: c.kind,
      machineId: r.machineId,
      gpu: c.gpu,
      ...(c.gpuUuid ? { gpuUuid: c.gpuUuid } : {}),
      since,
      raisedAt: old?.raisedAt ?? null,
      sentence: c.sentence,
      lastSeenAt: now,
    };
    if (base.raisedAt === null && due && !quiet) {
      base.raisedAt = now;
      changes.push({ type: 'raise', alert: base });
    } else if (base.raisedAt !== null && old !== undefined && old.sentence !== c.sentence && !quiet) {
      changes.push({ type: 'update', alert: base });
    } else if (base.raisedAt !== null && quiet && old !== undefined) {
      base.sentence = old.sentence; // keep what the message shows until the snooze ends
    }
    alerts[c.key] = base;
  }

  for (const [key, a] of Object.entries(prev.alerts)) {
    if (a.machineId !== r.machineId || seenKeys.has(key)) continue;
    const gone = a.kind === 'xid' ? now - a.lastSeenAt >= settings.xidQuietMinutes * 60_000 : observed.has(a.kind);
    if (!gone) continue;
    delete alerts[key];
    if (a.raisedAt !== null) changes.push({ type: 'clear', alert: a, at: now });
  }

  const gpuCount = { ...prev.gpuCount };
  if (r.ok && r.snapshot.view === 'host' && r.snapshot.gpuError === null)
    gpuCount[r.machineId] = Math.max(gpuCount[r.machineId] ?? 0, r.snapshot.gpus.length);
  return { next: { ...prev, alerts, gpuCount, lastReadingAt: Math.max(prev.lastReadingAt ?? 0, now) }, changes };
}
