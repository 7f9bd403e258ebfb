import type { Machine } from '../config/machines.ts';
import { CodedError, ErrorCode, asCodedError } from '../errors.ts';
import {
  parseComputeAppsCsv,
  parseFreeBytes,
  parseFuser,
  parseNvidiaOutput,
  parseQueryGpuCsv,
} from '../gpu/parse/index.ts';
import type { MachineSnapshot } from '../gpu/snapshot.ts';
import type { HostMemory, NvidiaError } from '../gpu/types.ts';
import type { CommandRecord } from '../incident/events.ts';
import type { CommandSpec, ExecResult, Route } from '../ssh/types.ts';
import { APP_FIELDS, GPU_FIELDS, fuserDevices, hostMemory, queryComputeApps, queryGpus } from './commands.ts';

export interface SnapshotDeps {
  exec(route: Route, spec: CommandSpec): Promise<ExecResult>;
  now(): Date;
  commandTimeoutMs: number;
}

export type SnapshotOutcome =
  | { ok: true; snapshot: MachineSnapshot; commands: CommandRecord[] }
  | { ok: false; code: string; message: string; commands: CommandRecord[] };

export function recordOf(r: ExecResult): CommandRecord {
  return { machineId: r.machineId, command: r.command, code: r.code, signal: r.signal, durationMs: r.durationMs, timedOut: r.timedOut };
}

/**
 * One machine's GPUs, compute apps, holders and RAM, read in parallel over one (reused) SSH
 * connection. An nvidia-smi error becomes part of the snapshot; a machine we could not reach
 * or a command that hung becomes a coded failure.
 */
export async function takeSnapshot(machine: Machine, route: Route, deps: SnapshotDeps): Promise<SnapshotOutcome> {
  const t = { timeoutMs: deps.commandTimeoutMs };
  const commands: CommandRecord[] = [];
  const run = async (spec: CommandSpec): Promise<ExecResult> => {
    const r = await deps.exec(route, spec);
    commands.push(recordOf(r));
    if (r.timedOut)
      throw new CodedError(ErrorCode.CommandTimeout, `\`${spec.argv[0]}\` did not answer within ${Math.round(spec.timeoutMs / 1000)} s and was ended`, {
        command: r.command,
      });
    return r;
  };
  const view = machine.kind === 'container' ? 'container' : 'host';
  try {
    const [gpuR, appsR, memR, fuserR] = await Promise.all([
      run(queryGpus(t)),
      run(queryComputeApps(t)),
      run(hostMemory(t)),
      view === 'container' ? run(fuserDevices(t)) : Promise.resolve(null),
    ]);
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
      if (!a.ok) throw new CodedError(ErrorCode.ParseFailed, `could not read nvidia-smi's process list: ${a.error.reason}`);
      processes = a.value.processes.map((p: MachineSnapshot['processes'][number]) => ({ ...p, gpuIndex: p.gpuIndex ?? gpus.find((g) => g.uuid === p.gpuUuid)?.index ?? null }));
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
    return {
      ok: true,
      commands,
      snapshot: { machineId: machine.id, view, takenAt: deps.now().toISOString(), gpus, processes, holders, kernelMounts, ram, gpuError, ...(holdersError !== null ? { holdersError } : {}) },
    };
  } catch (e) {
    const ce = asCodedError(e);
    return { ok: false, code: ce.code, message: ce.message, commands };
  }
}

function errorFrom(r: ExecResult): NvidiaError {
  const text = `${r.stdout}\n${r.stderr}`.trim();
  const parsed = parseNvidiaOutput(text, { exitCode: r.code });
  if (parsed.ok && parsed.value.error) return parsed.value.error;
  const firstLine = text.split('\n')[0] ?? '';
  return { kind: 'unknown', message: `nvidia-smi exited with ${r.code ?? r.signal}: ${firstLine.slice(0, 200)}`, busId: null };
}
