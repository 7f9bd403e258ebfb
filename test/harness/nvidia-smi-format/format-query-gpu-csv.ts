import type { Gpu } from '../../../src/gpu/types.ts';
import { type CsvFormatOptions, csvHeaderCell, csvLines, csvValue, CSV_NA } from './csv-options.ts';
import { InvalidQueryFieldError } from './invalid-query-field-error.ts';
import { QUERY_GPU_FIELD_UNITS } from '../../../src/gpu/parse/query-gpu-fields.ts';
import { csvTimestampUtc } from './text-layout.ts';

function fieldValue(
  field: string,
  gpu: Gpu,
  position: number,
  all: readonly Gpu[],
  opts: CsvFormatOptions,
): string | number | null {
  switch (field) {
    case 'index':
      return gpu.index ?? position;
    case 'name':
    case 'gpu_name':
      return gpu.name;
    case 'uuid':
    case 'gpu_uuid':
      return gpu.uuid;
    case 'pci.bus_id':
    case 'gpu_bus_id':
      return gpu.busId;
    case 'memory.used':
      return gpu.memoryUsedMiB;
    case 'memory.total':
      return gpu.memoryTotalMiB;
    case 'memory.free':
      return gpu.memoryUsedMiB === null || gpu.memoryTotalMiB === null
        ? null
        : Math.max(0, gpu.memoryTotalMiB - gpu.memoryUsedMiB);
    case 'utilization.gpu':
      return gpu.utilizationPct;
    case 'count':
      return all.length;
    case 'driver_version':
      return opts.driverVersion ?? null;
    case 'persistence_mode': {
      const on = opts.persistenceModes?.[position];
      return on === undefined ? null : on ? 'Enabled' : 'Disabled';
    }
    case 'gpu_recovery_action':
      return opts.recoveryActions?.[position] ?? null;
    case 'timestamp':
      return opts.timestamp === undefined ? null : csvTimestampUtc(opts.timestamp);
    default:
      return null;
  }
}

/**
 * `nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]`. Known fields the snapshot
 * doesn't model print `[N/A]`; an unknown field throws {@link InvalidQueryFieldError}, as the
 * real tool refuses the whole query.
 */
export function formatQueryGpuCsv(gpus: readonly Gpu[], fields: readonly string[], opts: CsvFormatOptions): string {
  const units = fields.map((f) => {
    const unit = QUERY_GPU_FIELD_UNITS.get(f);
    if (unit === undefined) throw new InvalidQueryFieldError(f);
    return unit;
  });
  const rows: string[][] = [];
  if (opts.header) rows.push(fields.map((f, i) => csvHeaderCell(f, units[i] ?? '')));
  gpus.forEach((gpu, position) => {
    rows.push(
      fields.map((f, i) => {
        const v = fieldValue(f, gpu, position, gpus, opts);
        return v === null ? CSV_NA : csvValue(v, units[i] ?? '', opts.units);
      }),
    );
  });
  return csvLines(rows);
}
