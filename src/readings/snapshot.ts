import type { Machine } from '../config/machines.ts';
import { CodedError, ErrorCode, asCodedError } from '../errors.ts';
import {
  parseComputeAppsCsv,
  parseFreeBytes,
  parseFuser,
  parseNvidiaOutput,
  parseQueryGpuCsv,
} from '../gpu/parse/index.ts';
import type { ProcReading } from '../gpu/holders.ts';
import { causeFields, type HostSideRead, rowFields } from '../gpu/snapshot-table.ts';
import type { MachineSnapshot } from '../gpu/snapshot.ts';
import type { HostMemory, NvidiaError } from '../gpu/types.ts';
import type { CommandRecord } from '../incident/events.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import type { ExecResult, Route } from '../ssh/types.ts';
import {
  APP_FIELDS,
  GPU_FIELDS,
  fuserDevices,
  hostMemory,
  queryComputeApps,
  queryGpus,
} from '../agent-grammar/templates/snapshot-commands.ts';
import { machineRead, parseMachineRead } from '../agent-grammar/templates/machine-read.ts';
import { parseProcReadings, readProcs } from '../agent-grammar/templates/unstick-commands.ts';

export interface SnapshotDeps {
  exec(route: Route, spec: CommandSpec): Promise<ExecResult>;
  now(): Date;
  commandTimeoutMs: number;
}

export interface SnapshotOptions {
  /**
   * Also read the GPU holders' command lines and their parents' (the read-procs template, on the
   * PIDs this read found; a second command, only when something holds a GPU) and keep the root
   * causes they show on the snapshot (`rootCauses`). Default false. A function decides from the
   * snapshot just read (the watchdog: only when host RAM is over its threshold).
   */
  commandLines?: boolean | ((s: MachineSnapshot) => boolean);
  /**
   * Container view, with `commandLines`: what its host says (GPU map, compute apps in the
   * container), so the snapshot's `holderRows` place each holder on a GPU. Absent: not asked
   * (no rows are placed in the container view).
   */
  hostSide?: () => Promise<HostSideRead & { commands: CommandRecord[] }>;
}

export type SnapshotOutcome =
  | { ok: true; snapshot: MachineSnapshot; commands: CommandRecord[] }
  | { ok: false; code: ErrorCode; message: string; commands: CommandRecord[] };

export function recordOf(r: ExecResult): CommandRecord {
  return {
    machineId: r.machineId,
    command: r.command,
    code: r.code,
    signal: r.signal,
    durationMs: r.durationMs,
    timedOut: r.timedOut,
  };
}

/**
 * One machine's GPUs, compute apps, holders and RAM, read in parallel in one SSH session over one
 * (reused) connection. An nvidia-smi error becomes part of the snapshot; a machine we could not reach
 * or a command that hung becomes a coded failure.
 */
export async function takeSnapshot(
  machine: Machine,
  route: Route,
  deps: SnapshotDeps,
  opts: SnapshotOptions = {},
): Promise<SnapshotOutcome> {
  return (await takeSnapshotWith(machine, route, deps, [], opts)).outcome;
}

/** What a query added to a snapshot's read answered (`timedOut`: it hung and was ended; the snapshot still counts). */
export type ExtraAnswer = Answer & { timedOut: boolean };

/**
 * A snapshot plus `extras`: more fixed queries run in the same read script, in the same SSH
 * session (the watchdog's kernel log, process states, recovery action). An extra that hangs or
 * fails does not fail the snapshot; its answer says so. `extras` is null when the read failed.
 * `opts.commandLines`: root causes too (a second command, only when something holds a GPU).
 */
export async function takeSnapshotWith(
  machine: Machine,
  route: Route,
  deps: SnapshotDeps,
  extraSpecs: readonly CommandSpec[],
  opts: SnapshotOptions = {},
): Promise<{ outcome: SnapshotOutcome; extras: ExtraAnswer[] | null }> {
  const t = { timeoutMs: deps.commandTimeoutMs };
  const commands: CommandRecord[] = [];
  const view = machine.kind === 'container' ? 'container' : 'host';
  try {
    const own = [queryGpus(t), queryComputeApps(t), hostMemory(t), ...(view === 'container' ? [fuserDevices(t)] : [])];
    const answers = await readAll(route, [...own, ...extraSpecs], deps, commands, own.length);
    const [gpuR, appsR, memR, fuserR = null] = answers.slice(0, own.length);
    const extras = answers.slice(own.length);
    if (gpuR === undefined || appsR === undefined || memR === undefined)
      throw new Error('machine read: missing answers');
    let gpuError: NvidiaError | null = null;
    let gpus: MachineSnapshot['gpus'] = [];
    let processes: MachineSnapshot['processes'] = [];
    if (gpuR.code === 0) {
      const g = parseQueryGpuCsv(gpuR.stdout, [...GPU_FIELDS]);
      if (!g.ok) throw new CodedError(ErrorCode.ParseFailed, `could not read nvidia-smi's GPU list: ${g.error.reason}`);
      gpus = g.value.gpus;
    } else {
      gpuError = errorFrom(gpuR);
    }
    if (appsR.code === 0) {
      const a = parseComputeAppsCsv(appsR.stdout, [...APP_FIELDS]);
      if (!a.ok)
        throw new CodedError(ErrorCode.ParseFailed, `could not read nvidia-smi's process list: ${a.error.reason}`);
      processes = a.value.processes.map((p: MachineSnapshot['processes'][number]) => ({
        ...p,
        gpuIndex: p.gpuIndex ?? gpus.find((g) => g.uuid === p.gpuUuid)?.index ?? null,
      }));
    } else if (!gpuError) {
      gpuError = errorFrom(appsR);
    }
    let ram: HostMemory | null = null;
    if (memR.code === 0) {
      const m = parseFreeBytes(memR.stdout);
      if (m.ok) ram = m.value;
    }
    let holders: MachineSnapshot['holders'] = [];
    let kernelMounts: string[] = [];
    let holdersError: string | null = null;
    if (fuserR && fuserR.stdout.trim() !== '') {
      const f = parseFuser(fuserR.stdout);
      if (f.ok) {
        holders = f.value.holders;
        kernelMounts = f.value.kernelMounts;
      } else {
        // Not silently "no holders": the thread shows why fuser could not list them.
        const first = fuserR.stdout.trim().split('\n')[0]?.trim().slice(0, 200) ?? '';
        holdersError = f.error.reason.includes(first) ? f.error.reason : `${f.error.reason}: ${first}`;
      }
    }
    const snapshot: MachineSnapshot = {
      machineId: machine.id,
      view,
      takenAt: deps.now().toISOString(),
      gpus,
      processes,
      holders,
      kernelMounts,
      ram,
      gpuError,
      ...(holdersError !== null ? { holdersError } : {}),
    };
    const wantCauses =
      typeof opts.commandLines === 'function' ? opts.commandLines(snapshot) : opts.commandLines === true;
    if (wantCauses) {
      const read = await readRootCauses(route, snapshot, deps, commands);
      Object.assign(snapshot, read.fields);
      Object.assign(snapshot, await holderRowsOf(snapshot, read.readings, opts, commands));
    }
    return { outcome: { ok: true, commands, snapshot }, extras };
  } catch (e) {
    const ce = asCodedError(e);
    return { outcome: { ok: false, code: ce.code, message: ce.message, commands }, extras: null };
  }
}

/** The Processes column's rows (src/gpu/snapshot-table.ts): host view from its own apps, container view by its host's map. */
async function holderRowsOf(
  s: MachineSnapshot,
  readings: readonly ProcReading[],
  opts: SnapshotOptions,
  commands: CommandRecord[],
): Promise<Pick<MachineSnapshot, 'holderRows' | 'holderRowsNote'>> {
  if (s.view === 'host' || !opts.hostSide) return rowFields(s, readings, undefined);
  let side: HostSideRead;
  try {
    const got = await opts.hostSide();
    commands.push(...got.commands);
    side = got;
  } catch (e) {
    side = { host: null, problem: asCodedError(e).message.slice(0, 200) };
  }
  return rowFields(s, readings, side);
}

/**
 * The root causes the holders' command lines show (src/gpu/snapshot-table.ts), or why they could
 * not be read. Best effort: the snapshot stands without them. Only the causes are kept, never the
 * command lines (they may hold tokens or paths nobody asked to log).
 */
async function readRootCauses(
  route: Route,
  s: MachineSnapshot,
  deps: SnapshotDeps,
  commands: CommandRecord[],
): Promise<{ fields: Pick<MachineSnapshot, 'rootCauses' | 'rootCausesNote'>; readings: ProcReading[] }> {
  const pids = [
    ...new Set(
      (s.view === 'container' ? s.holders.map((h) => h.pid) : s.processes.map((p) => p.pid)).filter(
        (p) => Number.isSafeInteger(p) && p > 0,
      ),
    ),
  ];
  if (pids.length === 0) return { fields: {}, readings: [] };
  const spec = readProcs(pids, { timeoutMs: deps.commandTimeoutMs });
  try {
    const r = await deps.exec(route, spec);
    commands.push(recordOf(r));
    if (r.timedOut)
      return {
        fields: {
          rootCausesNote: `reading the holders' command lines did not answer within ${Math.round(spec.timeoutMs / 1000)} s`,
        },
        readings: [],
      };
    const read = parseProcReadings(r.stdout);
    return { fields: causeFields(s, read), readings: read.readings };
  } catch (e) {
    return {
      fields: {
        rootCausesNote: `the holders' command lines could not be read: ${asCodedError(e).message.slice(0, 200)}`,
      },
      readings: [],
    };
  }
}

type Answer = Pick<ExecResult, 'code' | 'signal' | 'stdout' | 'stderr'>;

/**
 * Runs `parts` as one read script in one SSH session (machine-read.ts) and returns one answer per
 * part, in order; each part is recorded in the incident log with its own line and exit code. A part
 * that hung ends the read as a timeout naming it, as a whole read that hung does (only the first
 * `required` parts: the others' answers say they hung).
 */
async function readAll(
  route: Route,
  parts: CommandSpec[],
  deps: SnapshotDeps,
  commands: CommandRecord[],
  required = parts.length,
): Promise<ExtraAnswer[]> {
  const batch = machineRead(parts);
  const r = await deps.exec(route, batch);
  if (r.timedOut) {
    commands.push(recordOf(r));
    throw new CodedError(
      ErrorCode.CommandTimeout,
      `the machine read did not answer within ${Math.round(batch.timeoutMs / 1000)} s and was ended`,
      { command: r.command },
    );
  }
  const parsed = r.code === 0 ? parseMachineRead(parts, r.stdout) : null;
  if (parsed === null || !parsed.ok) {
    commands.push(recordOf(r));
    const why =
      parsed === null
        ? `exited with ${r.code ?? r.signal}${r.stderr.trim() === '' ? '' : `: ${r.stderr.trim().split('\n')[0]?.slice(0, 200)}`}`
        : parsed.reason;
    throw new CodedError(ErrorCode.ParseFailed, `the read script (sh, mktemp, timeout, base64) failed: ${why}`, {
      command: r.command,
    });
  }
  for (const p of parsed.parts) {
    commands.push({
      machineId: r.machineId,
      command: p.command,
      code: p.code,
      signal: null,
      durationMs: r.durationMs,
      timedOut: p.timedOut,
    });
  }
  const hung = parsed.parts.findIndex((p, i) => p.timedOut && i < required);
  const hungSpec = parts[hung];
  if (hungSpec !== undefined) {
    throw new CodedError(
      ErrorCode.CommandTimeout,
      `\`${hungSpec.argv[0]}\` did not answer within ${Math.round(hungSpec.timeoutMs / 1000)} s and was ended`,
      {
        command: parsed.parts[hung]?.command ?? r.command,
      },
    );
  }
  return parsed.parts.map((p) => ({
    code: p.code,
    signal: null,
    stdout: p.stdout,
    stderr: p.stderr,
    timedOut: p.timedOut,
  }));
}

function errorFrom(r: Answer): NvidiaError {
  const text = `${r.stdout}\n${r.stderr}`.trim();
  const parsed = parseNvidiaOutput(text, { exitCode: r.code });
  if (parsed.ok && parsed.value.error) return parsed.value.error;
  const firstLine = text.split('\n')[0] ?? '';
  return {
    kind: 'unknown',
    message: `nvidia-smi exited with ${r.code ?? r.signal}: ${firstLine.slice(0, 200)}`,
    busId: null,
  };
}
