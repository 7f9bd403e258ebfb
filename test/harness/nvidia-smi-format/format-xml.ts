import type { Gpu, GpuProcess, MigDevice, ParsedOutput } from '../../../src/gpu/types.ts';
import { asctimeUtc } from './text-layout.ts';

export interface FormatXmlOptions {
  /** `<timestamp>`, printed in UTC. */
  timestamp: Date;
  /** Per process (same order as `s.processes`): MIG GPU/compute instance; `N/A` when absent. */
  processPlacement?: ReadonlyArray<{ gi: number | null; ci: number | null } | undefined>;
}

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function tag(depth: number, name: string, value: string | number | null): string {
  return `${'\t'.repeat(depth)}<${name}>${value === null ? 'N/A' : escapeXml(String(value))}</${name}>`;
}

function mib(value: number | null): string | null {
  return value === null ? null : `${value} MiB`;
}

function memoryBlock(depth: number, used: number | null, total: number | null): string[] {
  const free = used === null || total === null ? null : Math.max(0, total - used);
  return [
    `${'\t'.repeat(depth)}<fb_memory_usage>`,
    tag(depth + 1, 'total', mib(total)),
    tag(depth + 1, 'reserved', mib(total === null ? null : 0)),
    tag(depth + 1, 'used', mib(used)),
    tag(depth + 1, 'free', mib(free)),
    `${'\t'.repeat(depth)}</fb_memory_usage>`,
  ];
}

function migBlock(devices: readonly MigDevice[]): string[] {
  if (devices.length === 0) return ['\t\t<mig_devices>', '\t\t\tNone', '\t\t</mig_devices>'];
  const lines = ['\t\t<mig_devices>'];
  for (const m of devices) {
    lines.push(
      '\t\t\t<mig_device>',
      tag(4, 'index', m.migDevice),
      tag(4, 'gpu_instance_id', m.gi),
      tag(4, 'compute_instance_id', m.ci),
      ...memoryBlock(4, m.memoryUsedMiB, m.memoryTotalMiB),
      '\t\t\t</mig_device>',
    );
  }
  lines.push('\t\t</mig_devices>');
  return lines;
}

function processBlock(entries: ReadonlyArray<{ p: GpuProcess; gi: number | null; ci: number | null }>): string[] {
  const lines = ['\t\t<processes>'];
  for (const { p, gi, ci } of entries) {
    lines.push(
      '\t\t\t<process_info>',
      tag(4, 'gpu_instance_id', gi),
      tag(4, 'compute_instance_id', ci),
      tag(4, 'pid', p.pid),
      tag(4, 'type', p.type),
      tag(4, 'process_name', p.name),
      tag(4, 'used_memory', mib(p.usedMiB)),
      '\t\t\t</process_info>',
    );
  }
  lines.push('\t\t</processes>');
  return lines;
}

function gpuBlock(gpu: Gpu, position: number, s: ParsedOutput, opts: FormatXmlOptions): string[] {
  const index = gpu.index ?? position;
  const busId = gpu.busId ?? 'N/A';
  const [domain, bus, devFn] = busId.split(':');
  const migs = s.migDevices.filter((m) => m.gpuIndex === index);
  const procs = s.processes
    .map((p, i) => ({ p, gi: opts.processPlacement?.[i]?.gi ?? null, ci: opts.processPlacement?.[i]?.ci ?? null }))
    .filter(({ p }) => (p.gpuUuid !== null && gpu.uuid !== null ? p.gpuUuid === gpu.uuid : p.gpuIndex === index));
  return [
    `\t<gpu id="${escapeXml(busId)}">`,
    tag(2, 'product_name', gpu.name),
    '\t\t<mig_mode>',
    tag(3, 'current_mig', migs.length > 0 ? 'Enabled' : 'Disabled'),
    tag(3, 'pending_mig', migs.length > 0 ? 'Enabled' : 'Disabled'),
    '\t\t</mig_mode>',
    ...migBlock(migs),
    tag(2, 'uuid', gpu.uuid),
    tag(2, 'minor_number', index),
    '\t\t<pci>',
    tag(3, 'pci_bus', bus ?? null),
    tag(3, 'pci_device', devFn?.split('.')[0] ?? null),
    tag(3, 'pci_domain', domain?.slice(-4) ?? null),
    tag(3, 'pci_bus_id', busId),
    '\t\t</pci>',
    ...memoryBlock(2, gpu.memoryUsedMiB, gpu.memoryTotalMiB),
    '\t\t<utilization>',
    tag(3, 'gpu_util', gpu.utilizationPct === null ? null : `${gpu.utilizationPct} %`),
    '\t\t</utilization>',
    ...processBlock(procs),
    '\t\t<accounted_processes>',
    '\t\t</accounted_processes>',
    '\t</gpu>',
    '',
  ];
}

/**
 * `nvidia-smi -q -x` in the DTD v13 shape (tab indented), limited to the elements a snapshot
 * carries. GPUs appear in index order, which is how readers recover the index.
 */
export function formatXml(s: ParsedOutput, opts: FormatXmlOptions): string {
  const lines = [
    '<?xml version="1.0" ?>',
    '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
    '<nvidia_smi_log>',
    tag(1, 'timestamp', asctimeUtc(opts.timestamp)),
    tag(1, 'driver_version', s.driverVersion),
    tag(1, 'cuda_version', s.cudaVersion),
    tag(1, 'attached_gpus', s.gpus.length),
    ...s.gpus.flatMap((g, i) => gpuBlock(g, i, s, opts)),
    '</nvidia_smi_log>',
  ];
  return `${lines.join('\n')}\n`;
}
