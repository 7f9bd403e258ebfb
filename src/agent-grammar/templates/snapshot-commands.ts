import type { CommandSpec } from '../command-spec.ts';

/**
 * The fixed command templates gpu-medic runs. Every word is a constant or an integer read from
 * a machine; nothing a user typed ever becomes part of a command.
 */
export const GPU_FIELDS = [
  'index',
  'uuid',
  'name',
  'pci.bus_id',
  'memory.used',
  'memory.total',
  'utilization.gpu',
] as const;
export const APP_FIELDS = ['gpu_uuid', 'pid', 'process_name', 'used_memory'] as const;

export interface TemplateOptions {
  timeoutMs: number;
}

export function queryGpus(o: TemplateOptions): CommandSpec {
  return {
    argv: ['nvidia-smi', `--query-gpu=${GPU_FIELDS.join(',')}`, '--format=csv,noheader,nounits'],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'gpus', args: [] },
  };
}

export function queryComputeApps(o: TemplateOptions): CommandSpec {
  return {
    argv: ['nvidia-smi', `--query-compute-apps=${APP_FIELDS.join(',')}`, '--format=csv,noheader,nounits'],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'apps', args: [] },
  };
}

export function hostMemory(o: TemplateOptions): CommandSpec {
  return { argv: ['free', '-b'], timeoutMs: o.timeoutMs, agent: { verb: 'ram', args: [] } };
}

/** Holders of the device nodes, as the container sees them (container PIDs). `-v` puts details on stderr. */
export function fuserDevices(o: TemplateOptions): CommandSpec {
  // A glob must be expanded by the remote shell: the one template that is not a plain argv.
  return {
    argv: ['sh', '-c', 'fuser -v /dev/nvidia* 2>&1; true'],
    timeoutMs: o.timeoutMs,
    agent: { verb: 'holders', args: [] },
  };
}
