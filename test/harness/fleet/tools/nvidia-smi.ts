/**
 * Fake `nvidia-smi`, run by the fleet's tool server (tool-server.ts) for the machine's bin/
 * wrapper's client, or standalone by node (standalone.ts). Output is computed from the host state (GPUs, leaks, errors) and the live GPU
 * holders, and printed with the shared writers in test/harness/nvidia-smi-format (the exact real formats).
 *
 * Host view lists host PIDs; container view shows the same (global) memory but no processes, as
 * the real driver does. Supported: no args (table), --query-gpu, --query-compute-apps,
 * --format=csv[,noheader][,nounits], -q -x, -r/--gpu-reset, -pm 0|1, -i <list> (index as this
 * machine numbers it, UUID or bus id). A container shows only the GPUs passed to it, renumbered
 * from 0 in bus-id order (state.ts visibleGpus), and may be told to misreport one (spoof.json).
 */
import {
  formatComputeAppsCsv,
  formatGpuResetSuccess,
  formatNvidiaError,
  formatQueryGpuCsv,
  formatTable,
  formatXml,
  InvalidQueryFieldError,
} from '../../nvidia-smi-format/index.ts';
import type { CommandOutput } from '../../nvidia-smi-format/index.ts';
import type { Gpu, GpuProcess, ParsedOutput } from '../../../../src/gpu/types.ts';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import {
  appendToolLog,
  gpuUsage,
  type GpuSpoof,
  type GpuState,
  type GpuUsage,
  type HostState,
  readHolders,
  readJson,
  visibleGpus,
} from '../state.ts';
import type { MachineContext, ToolResult } from './machine-context.ts';

interface Args {
  queryGpu: string[] | null;
  queryApps: string[] | null;
  format: string[] | null;
  ids: string[] | null;
  query: boolean;
  xml: boolean;
  reset: boolean;
  persistence: '0' | '1' | null;
}

class UsageError extends Error {}

/** What the real tool would print and exit with: thrown by `emit`, caught by `runNvidiaSmi`. */
class Exit {
  constructor(readonly out: CommandOutput) {}
}

const INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n";

function parseArgs(argv: string[]): Args {
  const a: Args = {
    queryGpu: null,
    queryApps: null,
    format: null,
    ids: null,
    query: false,
    xml: false,
    reset: false,
    persistence: null,
  };
  const list = (v: string) =>
    v
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '');
  for (let i = 0; i < argv.length; i++) {
    const tok = argv[i] ?? '';
    const eq = tok.indexOf('=');
    const name = tok.startsWith('--') && eq > 0 ? tok.slice(0, eq) : tok;
    const inline = tok.startsWith('--') && eq > 0 ? tok.slice(eq + 1) : null;
    const value = (): string => {
      if (inline !== null) return inline;
      const v = argv[++i];
      if (v === undefined) throw new UsageError(`missing value for ${tok}`);
      return v;
    };
    switch (name) {
      case '--query-gpu':
        a.queryGpu = list(value());
        break;
      case '--query-compute-apps':
        a.queryApps = list(value());
        break;
      case '--format':
        a.format = list(value());
        break;
      case '-i':
      case '--id':
        a.ids = list(value());
        break;
      case '-q':
      case '--query':
        a.query = true;
        break;
      case '-x':
      case '--xml-format':
        a.xml = true;
        break;
      case '-r':
      case '--gpu-reset':
        a.reset = true;
        break;
      case '-pm':
      case '--persistence-mode': {
        const v = value();
        if (v !== '0' && v !== '1' && v !== 'ENABLED' && v !== 'DISABLED')
          throw new UsageError(`bad persistence mode ${v}`);
        a.persistence = v === '1' || v === 'ENABLED' ? '1' : '0';
        break;
      }
      default:
        throw new UsageError(`unsupported argument ${tok}`);
    }
  }
  return a;
}

function emit(o: CommandOutput): never {
  throw new Exit(o);
}

/** A GPU as this machine shows it: the host's record and the index it is listed under here. */
type Shown = { gpu: GpuState; index: number };

function busKey(b: string): string {
  const t = b.trim().toUpperCase();
  return t.length === 12 ? `0000${t}` : t;
}

/** `-i` accepts an index (this machine's numbering), a UUID or a PCI bus id, as the real one does. */
function targets(shown: Shown[], ids: string[] | null): Shown[] {
  if (ids === null) return shown;
  return ids.map((id) => {
    const hit = /^\d+$/.test(id)
      ? shown.find((x) => x.index === Number(id))
      : id.startsWith('GPU-')
        ? shown.find((x) => x.gpu.uuid === id)
        : shown.find((x) => busKey(x.gpu.busId) === busKey(id));
    if (hit === undefined) emit({ stdout: `No devices were found\n`, stderr: '', exitCode: 6 });
    return hit;
  });
}

function snapshot(
  ctx: MachineContext,
  state: HostState,
  chosen: Shown[],
  now: number,
): { parsed: ParsedOutput; usage: GpuUsage[] } {
  const spoofPath = join(ctx.dir, 'spoof.json');
  const spoof: GpuSpoof = ctx.info.kind === 'container' && existsSync(spoofPath) ? readJson<GpuSpoof>(spoofPath) : {};
  const all = gpuUsage(state, readHolders(ctx.info.hostDir), ctx.info.hostProc, now);
  const usage = chosen.map(
    (c) => all.find((u) => u.gpu === c.gpu) ?? { gpu: c.gpu, usedMiB: c.gpu.leakMiB, processes: [] },
  );
  const gpus: Gpu[] = usage.map((u, i) => {
    const index = chosen[i]?.index ?? u.gpu.index;
    const lie = spoof[String(index)];
    return {
      index,
      name: u.gpu.name,
      busId: lie?.busId ?? u.gpu.busId,
      uuid: lie?.uuid ?? u.gpu.uuid,
      memoryUsedMiB: u.usedMiB,
      memoryTotalMiB: u.gpu.memoryTotalMiB,
      utilizationPct: u.processes.length > 0 ? 100 : 0,
    };
  });
  // The driver reports host PIDs; in a container they can't be resolved and the panel is empty.
  const processes: GpuProcess[] =
    ctx.info.kind === 'container'
      ? []
      : usage
          .flatMap((u) =>
            u.processes.map((p) => ({
              gpuIndex: u.gpu.index,
              gpuUuid: u.gpu.uuid,
              pid: p.holder.hostPid,
              type: 'C',
              name: p.holder.cmdline.split(' ')[0] ?? p.holder.cmdline,
              usedMiB: p.mib,
            })),
          )
          .sort((x, y) => (x.gpuIndex ?? 0) - (y.gpuIndex ?? 0) || x.pid - y.pid);
  return {
    usage,
    parsed: {
      source: 'table',
      driverVersion: state.driverVersion,
      cudaVersion: state.cudaVersion,
      gpus,
      migDevices: [],
      processes,
      holders: [],
      kernelMounts: [],
      error: null,
    },
  };
}

function reset(ctx: MachineContext, state: HostState, chosen: Shown[], now: number): never {
  const targets = chosen.map((c) => c.gpu);
  const first = targets[0]?.busId ?? null;
  // Needs CAP_SYS_ADMIN in the initial user namespace: a container is always refused.
  if (ctx.info.kind === 'container') emit(formatNvidiaError('reset_not_supported', first));
  const { usage } = snapshot(ctx, state, chosen, now);
  const busy = usage.find((u) => u.processes.length > 0 || u.gpu.persistence);
  if (busy !== undefined) emit(formatNvidiaError('reset_in_use', busy.gpu.busId));
  for (const g of targets) {
    g.leakMiB = 0;
    g.resetAt = now;
  }
  ctx.writeHostState(state);
  emit(formatGpuResetSuccess(targets.map((g) => g.busId)));
}

function persistence(ctx: MachineContext, state: HostState, chosen: Shown[], on: boolean): never {
  const targets = chosen.map((c) => c.gpu);
  if (ctx.info.kind === 'container') {
    const bus = targets[0]?.busId ?? '';
    emit({
      stdout: `Unable to set persistence mode for GPU ${bus}: Insufficient Permissions\nTerminating early due to previous errors.\n`,
      stderr: '',
      exitCode: 4,
    });
  }
  for (const g of targets) g.persistence = on;
  ctx.writeHostState(state);
  const verb = on ? 'Enabled' : 'Disabled';
  emit({
    stdout: `${targets.map((g) => `${verb} persistence mode for GPU ${g.busId}.\n`).join('')}All done.\n`,
    stderr: '',
    exitCode: 0,
  });
}

/** One call of the fake tool: its output and exit code, or 'hang' (a wedged driver never answers). */
export function runNvidiaSmi(argv: string[], ctx: MachineContext): ToolResult {
  const notes: string[] = [];
  try {
    body(argv, ctx, notes);
  } catch (e) {
    if (!(e instanceof Exit)) throw e;
    return { ...e.out, stderr: notes.join('') + e.out.stderr };
  }
  // body returns without emitting only when the machine is hung.
  return 'hang';
}

function body(argv: string[], ctx: MachineContext, notes: string[]): void {
  appendToolLog(ctx.dir, 'nvidia-smi', argv);
  if (ctx.hung()) return;

  let args: Args;
  try {
    args = parseArgs(argv);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    notes.push(`fake nvidia-smi: ${e.message}\n`);
    emit({ stdout: INVALID_ARGS, stderr: '', exitCode: 2 });
  }

  const state = ctx.readHostState();
  if (state.error !== null) emit(formatNvidiaError(state.error));
  const chosen = targets(visibleGpus(state, ctx.info), args.ids);
  const lost = chosen.map((c) => c.gpu).filter((g) => g.error === 'gpu_lost');
  if (lost.length > 0) {
    const outs = lost.map((g) => formatNvidiaError('gpu_lost', g.busId));
    emit({ stdout: outs.map((o) => o.stdout).join(''), stderr: '', exitCode: outs[0]?.exitCode ?? 15 });
  }
  const now = Date.now();

  if (args.reset) reset(ctx, state, chosen, now);
  if (args.persistence !== null) persistence(ctx, state, chosen, args.persistence === '1');

  const { parsed } = snapshot(ctx, state, chosen, now);
  const timestamp = new Date(now);
  if (args.queryGpu !== null || args.queryApps !== null) {
    if (args.format === null || !args.format.includes('csv')) {
      emit({
        stdout: '"--format=" switch is missing. Please run \'nvidia-smi -h\' for help.\n',
        stderr: '',
        exitCode: 2,
      });
    }
    const opts = {
      header: !args.format.includes('noheader'),
      units: !args.format.includes('nounits'),
      timestamp,
      driverVersion: state.driverVersion,
      persistenceModes: chosen.map((c) => c.gpu.persistence),
      recoveryActions: chosen.map((c) => c.gpu.recoveryAction ?? 'None'),
    };
    // A driver that predates the field refuses the whole query, as it refuses any unknown field.
    if (state.recoveryActionField === false && args.queryGpu?.includes('gpu_recovery_action')) {
      const e = new InvalidQueryFieldError('gpu_recovery_action');
      emit({ stdout: `${e.message}\n\n`, stderr: '', exitCode: e.exitCode });
    }
    try {
      const text =
        args.queryGpu !== null
          ? formatQueryGpuCsv(parsed.gpus, args.queryGpu, opts)
          : formatComputeAppsCsv(parsed.processes, parsed.gpus, args.queryApps ?? [], opts);
      emit({ stdout: text, stderr: '', exitCode: 0 });
    } catch (e) {
      if (!(e instanceof InvalidQueryFieldError)) throw e;
      emit({ stdout: `${e.message}\n\n`, stderr: '', exitCode: e.exitCode });
    }
  }
  if (args.query) {
    if (!args.xml) {
      notes.push('fake nvidia-smi: -q without -x is not simulated\n');
      emit({ stdout: INVALID_ARGS, stderr: '', exitCode: 2 });
    }
    emit({ stdout: formatXml(parsed, { timestamp }), stderr: '', exitCode: 0 });
  }
  if (args.xml) emit({ stdout: INVALID_ARGS, stderr: '', exitCode: 2 });
  const gpuDetails = chosen.map((c) => ({ persistence: c.gpu.persistence ? 'On' : 'Off' }));
  emit({
    stdout: formatTable(parsed, { timestamp, containerView: ctx.info.kind === 'container', gpuDetails }),
    stderr: '',
    exitCode: 0,
  });
}
