import type { Gpu, GpuProcess } from '../../../src/gpu/types.ts';
import { type CsvFormatOptions, csvHeaderCell, csvLines, csvValue } from './csv-options.ts';
import { InvalidQueryFieldError } from './invalid-query-field-error.ts';
import { csvTimestampUtc } from './text-layout.ts';
import { COMPUTE_APPS_FIELD_UNITS } from '../../../src/gpu/parse/parse-compute-apps-csv.ts';

function gpuOf(p: GpuProcess, gpus: readonly Gpu[]): Gpu | undefined {
  if (p.gpuUuid !== null) {
    const byUuid = gpus.find((g) => g.uuid === p.gpuUuid);
    if (byUuid !== undefined) return byUuid;
  }
  return p.gpuIndex === null ? undefined : gpus.find((g, i) => (g.index ?? i) === p.gpuIndex);
}

function fieldValue(
  field: string,
  p: GpuProcess,
  gpu: Gpu | undefined,
  opts: CsvFormatOptions,
): string | number | null {
  switch (field) {
    case 'timestamp':
      return opts.timestamp === undefined ? null : csvTimestampUtc(opts.timestamp);
    case 'gpu_name':
      return gpu?.name ?? null;
    case 'gpu_bus_id':
      return gpu?.busId ?? null;
    case 'gpu_uuid':
      return p.gpuUuid ?? gpu?.uuid ?? null;
    case 'pid':
      return p.pid;
    case 'process_name':
    case 'name':
      return p.name;
    case 'used_gpu_memory':
    case 'used_memory':
      return p.usedMiB;
    default:
      return null;
  }
}

/**
 * `nvidia-smi --query-compute-apps=<fields> --format=csv[,noheader][,nounits]`: compute processes
 * only (type `C`, `C+G` or unknown; graphics-only `G` rows are not listed). No process = header
 * only (or nothing with `noheader`).
 */
export function formatComputeAppsCsv(
  processes: readonly GpuProcess[],
  gpus: readonly Gpu[],
  fields: readonly string[],
  opts: CsvFormatOptions,
): string {
  const units = fields.map((f) => {
    const unit = COMPUTE_APPS_FIELD_UNITS.get(f);
    if (unit === undefined) throw new InvalidQueryFieldError(f);
    return unit;
  });
  const rows: string[][] = [];
  if (opts.header) rows.push(fields.map((f, i) => csvHeaderCell(f, units[i] ?? '')));
  for (const p of processes) {
    if (p.type === 'G') continue;
    const gpu = gpuOf(p, gpus);
    rows.push(fields.map((f, i) => csvValue(fieldValue(f, p, gpu, opts), units[i] ?? '', opts.units)));
  }
  return csvLines(rows);
}
