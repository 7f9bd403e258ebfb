import type { AlertKind } from './judge.ts';

/**
 * A condition is (machine, GPU, kind): the one thing both alert sources (the watchdog and
 * Alertmanager, src/alertmanager/) can raise, and so the one message they share. The GPU is its
 * UUID when the source knows it, else `gpu<host index>`, else `-`; kinds about the whole machine
 * ignore the GPU (a host RAM alert carries a DCGM exporter's GPU labels but is not about one GPU).
 * Pure.
 */
const MACHINE_WIDE: ReadonlySet<AlertKind> = new Set(['ram_high', 'unreachable', 'nvidia_smi_failing', 'gpus_missing']);

const UUID = /^GPU-[0-9a-fA-F-]{8,64}$/;

export function conditionKey(c: {
  machineId: string;
  kind: AlertKind;
  gpu: number | null;
  gpuUuid?: string | null | undefined;
}): string {
  const gpu = MACHINE_WIDE.has(c.kind)
    ? '-'
    : c.gpuUuid && UUID.test(c.gpuUuid)
      ? c.gpuUuid.toLowerCase()
      : c.gpu !== null
        ? `gpu${c.gpu}`
        : '-';
  return `${c.machineId}|${gpu}|${c.kind}`;
}
