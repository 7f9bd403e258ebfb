import type { ParsedOutput } from '../gpu/types.ts';

function cell(v: string | number | null): string {
  return v === null ? '-' : String(v);
}

function grid(
  header: readonly string[],
  rows: ReadonlyArray<readonly string[]>,
  numeric: ReadonlySet<number>,
): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[]): string =>
    r
      .map((c, i) => (numeric.has(i) ? c.padStart(widths[i] ?? 0, ' ') : c.padEnd(widths[i] ?? 0, ' ')))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

/** A snapshot as the plain text the bot would post (monospace), one section per non-empty list. */
export function formatSnapshotText(s: ParsedOutput): string {
  const out: string[] = [];
  const versions = [
    s.driverVersion === null ? null : `driver ${s.driverVersion}`,
    s.cudaVersion === null ? null : `CUDA ${s.cudaVersion}`,
  ];
  out.push([`source: ${s.source}`, ...versions.filter((v) => v !== null)].join(', '));
  if (s.error !== null)
    out.push(`ERROR ${s.error.kind}${s.error.busId === null ? '' : ` (GPU ${s.error.busId})`}: ${s.error.message}`);
  if (s.gpus.length > 0) {
    out.push('', 'GPUs:');
    const rows = s.gpus.map((g) => [
      cell(g.index),
      cell(g.name),
      cell(g.busId),
      g.memoryUsedMiB === null && g.memoryTotalMiB === null
        ? '-'
        : `${cell(g.memoryUsedMiB)} / ${cell(g.memoryTotalMiB)}`,
      g.utilizationPct === null ? '-' : `${g.utilizationPct}%`,
      cell(g.uuid),
    ]);
    out.push(...grid(['GPU', 'Name', 'Bus-Id', 'Memory MiB', 'Util', 'UUID'], rows, new Set([0, 3, 4])));
  }
  if (s.migDevices.length > 0) {
    out.push('', 'MIG devices:');
    const rows = s.migDevices.map((m) => [
      String(m.gpuIndex),
      String(m.gi),
      String(m.ci),
      String(m.migDevice),
      `${cell(m.memoryUsedMiB)} / ${cell(m.memoryTotalMiB)}`,
    ]);
    out.push(...grid(['GPU', 'GI', 'CI', 'MIG', 'Memory MiB'], rows, new Set([0, 1, 2, 3, 4])));
  }
  if (s.source !== 'fuser' && s.source !== 'error') {
    out.push('', s.processes.length === 0 ? 'Processes: none listed' : 'Processes:');
    if (s.processes.length > 0) {
      const rows = s.processes.map((p) => [
        cell(p.gpuIndex ?? p.gpuUuid),
        String(p.pid),
        cell(p.type),
        cell(p.usedMiB),
        cell(p.name),
      ]);
      out.push(...grid(['GPU', 'PID', 'Type', 'MiB', 'Name'], rows, new Set([1, 3])));
    }
  }
  if (s.source === 'fuser') {
    out.push('', s.holders.length === 0 ? 'Holders: none' : 'Holders:');
    if (s.holders.length > 0) {
      const rows = s.holders.map((h) => [h.device, String(h.pid), cell(h.user), cell(h.access), cell(h.command)]);
      out.push(...grid(['Device', 'PID', 'User', 'Access', 'Command'], rows, new Set([1])));
    }
    if (s.kernelMounts.length > 0) out.push('', `Bind mounts (kernel, not processes): ${s.kernelMounts.join(' ')}`);
  }
  return `${out.join('\n')}\n`;
}
