/**
 * The first screen of a status snapshot: who holds each GPU (the table's Processes cell), then
 * only the flags that need action, each said once with its next step. What a person needs only
 * when digging (fuser's raw device rows, kernel mounts) goes to the snapshot's details message.
 * Pure; returns escaped mrkdwn lines.
 */
import type { GpuHolderRow } from '../gpu/gpu-holder-rows.ts';
import { HOST_RAM_CAUSES } from '../gpu/snapshot-causes.ts';
import { flagsOf, processesOn, type Flag, type MachineSnapshot } from '../gpu/snapshot.ts';
import type { Gpu } from '../gpu/types.ts';
import { code, text as esc } from './escape.ts';
import { leakedMemoryNext } from './leaked-memory.ts';
import { count } from '../text/units.ts';

/** Each GPU's holders as the Processes cell lists them: `PID [(host PID n)] command [MiB]`. */
export function holderItems(s: MachineSnapshot, g: Gpu): string[] {
  if (s.holderRows !== undefined) {
    return s.holderRows.filter((r) => r.gpuIndex === g.index).map((r) => holderItem(s.view, r));
  }
  return processesOn(s, g).map((p) => `${p.pid} ${p.name ?? '?'} ${p.usedMiB === null ? '?' : count(p.usedMiB)}`);
}

function holderItem(view: MachineSnapshot['view'], r: GpuHolderRow): string {
  const mib = r.usedMiB === null ? '' : ` ${count(r.usedMiB)} MiB`;
  const cmd = r.command ?? '?';
  if (view === 'container') {
    const pid = r.containerPid ?? '?';
    return `${pid}${r.hostPid !== null ? ` (host ${r.hostPid})` : ''} ${cmd}${mib}`;
  }
  return `${r.hostPid ?? '?'}${r.containerPid !== null ? ` (ct PID ${r.containerPid})` : ''} ${cmd}${mib}`;
}

export const PROCESSES_HEADER = 'Processes (PID, command, MiB)';

function gpuList(idx: readonly number[]): string {
  return idx.length === 1 ? `GPU ${idx[0]}` : `GPUs ${idx.join(', ')}`;
}

function mibList(ms: readonly number[]): string {
  return ms.length === 1
    ? `${count(ms[0] ?? 0)} MiB`
    : `${ms.slice(0, -1).map(count).join(', ')} and ${count(ms.at(-1) ?? 0)} MiB`;
}

/** GPUs with memory in use that no listed holder accounts for, said in one line. */
function unheldLine(
  s: MachineSnapshot,
  flags: ReadonlyArray<Extract<Flag, { kind: 'memory_without_process' }>>,
): string | null {
  const held = new Set((s.holderRows ?? []).map((r) => r.gpuIndex));
  const open = flags.filter((f) => !held.has(f.gpuIndex));
  if (open.length === 0) return null;
  const which = gpuList(open.map((f) => f.gpuIndex));
  const mib = mibList(open.map((f) => f.usedMiB));
  const one = open.length === 1;
  if (s.view === 'host')
    return `:warning: ${which}: ${mib} in use with no process holding ${one ? 'it' : 'them'} (a leaked context). Next step: ${leakedMemoryNext('`/gpu unstick`', one)}.`;
  if (s.holderRows !== undefined)
    return `:warning: ${which}: ${mib} in use and no process of ${code(s.machineId)} holds ${one ? 'it' : 'them'} (a leaked context, or another container's). Next step: \`/gpu status\` on the host shows who.`;
  const why = s.holdersError
    ? 'fuser failed too, so its holders are unknown: see the fuser error'
    : s.holders.length > 0
      ? 'fuser lists holders: see the details below'
      : 'fuser lists no process holding a GPU device either';
  return `:warning: ${which}: ${mib} in use and no process listed (normal inside a container: nvidia-smi cannot see host PIDs; ${why}). Next step: \`/gpu status\` on the host shows who.`;
}

/** The RAM warning. When a Why line gives the cause, the warning does not say it again. */
function ramPressureLine(s: MachineSnapshot, f: Extract<Flag, { kind: 'ram_pressure' }>): string {
  const head = `:warning: RAM pressure: ${f.usedPct}% used (${count(f.usedGiB)} of ${count(f.totalGiB)} GiB): ranks may hang.`;
  const explained = (s.rootCauses ?? []).some((c) => HOST_RAM_CAUSES.includes(c.kind));
  return explained
    ? `${head} Next step: lower the host cache the Why line names, then restart the server.`
    : `${head} Next step: check host-cache settings (e.g. SGLang --hicache-size is per TP rank).`;
}

/** The flags this file leaves to its caller to word: a GPU error, an unreadable GPU. */
export type ErrorFlag = Extract<Flag, { kind: 'gpu_error' | 'gpu_unreadable' }>;

/**
 * The flags that need action, in order: GPU errors, unreadable GPUs, RAM, memory no holder
 * explains (one line for all such GPUs). `other(f)` words the GPU errors and unreadable GPUs.
 */
export function actionLines(s: MachineSnapshot, other: (f: ErrorFlag) => string): string[] {
  const flags = flagsOf(s);
  const lines: string[] = [];
  for (const f of flags) if (f.kind === 'gpu_error' || f.kind === 'gpu_unreadable') lines.push(`:warning: ${other(f)}`);
  for (const f of flags) if (f.kind === 'ram_pressure') lines.push(ramPressureLine(s, f));
  const unheld = unheldLine(
    s,
    flags.filter((f): f is Extract<Flag, { kind: 'memory_without_process' }> => f.kind === 'memory_without_process'),
  );
  if (unheld) lines.push(unheld);
  return lines;
}

/**
 * The details of a snapshot, for the message after the first screen: fuser's device holders
 * (one line per process, its device files and access flags) and fuser's kernel-mount rows.
 */
export function detailLines(s: MachineSnapshot): string[] {
  const byPid = new Map<
    number,
    { devices: string[]; user: string | null; command: string | null; access: Set<string> }
  >();
  for (const h of s.holders) {
    const e = byPid.get(h.pid) ?? { devices: [], user: h.user, command: h.command, access: new Set<string>() };
    if (!e.devices.includes(h.device)) e.devices.push(h.device);
    if (h.access) e.access.add(h.access);
    byPid.set(h.pid, e);
  }
  const holders = [...byPid].map(
    ([pid, e]) =>
      `PID ${pid} ${code(e.command ?? '?')} (user ${code(e.user ?? '?')}): ${e.devices.map(code).join(', ')} · fuser access ${esc([...e.access].join(' ') || '?')}`,
  );
  return [
    ...(holders.length > 0 ? ['Device holders (fuser, container PIDs):', ...holders] : []),
    ...(s.view === 'container' && s.holders.length === 0 && s.kernelMounts.length > 0
      ? ['fuser shows only `kernel mount` rows (bind mounts, not processes)']
      : []),
  ];
}
