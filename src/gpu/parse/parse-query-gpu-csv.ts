import type { Gpu, ParsedOutput } from '../types.ts';
import { QUERY_GPU_FIELD_UNITS } from './query-gpu-fields.ts';
import { intValue, readCsv, textValue } from './csv-table.ts';
import { detectNvidiaError } from './detect-nvidia-error.ts';
import { emptyOutput } from './empty-output.ts';
import { normaliseBusId } from './normalise-bus-id.ts';
import { abort, guard, type ParseResult } from './parse-failure.ts';

export const QUERY_GPU_FIELDS: ReadonlySet<string> = new Set(QUERY_GPU_FIELD_UNITS.keys());

/**
 * `--query-gpu=... --format=csv[,noheader][,nounits]`. Pass `fields` (the query's field list) when
 * the output has no header; any field order works, unknown fields are ignored.
 */
export function parseQueryGpuCsv(text: string, fields: readonly string[] | null): ParseResult<ParsedOutput> {
  const error = detectNvidiaError(text);
  if (error !== null) return { ok: true, value: { ...emptyOutput('error'), error } };
  return guard(() => {
    const table = readCsv(text, fields, QUERY_GPU_FIELDS);
    const out = emptyOutput('csv');
    const col = (...names: string[]): number => table.fields.findIndex((f) => names.includes(f));
    const at = {
      index: col('index'),
      name: col('name', 'gpu_name'),
      uuid: col('uuid', 'gpu_uuid'),
      busId: col('pci.bus_id', 'gpu_bus_id'),
      used: col('memory.used'),
      total: col('memory.total'),
      util: col('utilization.gpu'),
      driver: col('driver_version'),
    };
    if (table.rows.length === 0) abort('the CSV lists no GPU');
    const get = (row: readonly string[], i: number): string => (i < 0 ? '' : (row[i] ?? ''));
    const unit = (i: number, fallback: string): string | null => (i < 0 ? null : (table.units[i] ?? fallback));
    out.gpus = table.rows.map((row): Gpu => {
      const busText = textValue(get(row, at.busId));
      const busId = busText === null ? null : normaliseBusId(busText);
      if (busText !== null && busId === null) abort(`unreadable bus id "${busText.slice(0, 30)}"`);
      const uuid = textValue(get(row, at.uuid));
      if (uuid !== null && !/^(GPU|MIG)-[0-9a-fA-F-]+$/.test(uuid)) abort(`unreadable GPU UUID "${uuid.slice(0, 50)}"`);
      return {
        index: intValue(get(row, at.index), null, 'GPU index'),
        name: textValue(get(row, at.name)),
        busId,
        uuid,
        memoryUsedMiB: intValue(get(row, at.used), unit(at.used, 'MiB') ?? 'MiB', 'memory.used'),
        memoryTotalMiB: intValue(get(row, at.total), unit(at.total, 'MiB') ?? 'MiB', 'memory.total'),
        utilizationPct: intValue(get(row, at.util), unit(at.util, '%') ?? '%', 'utilization.gpu'),
      };
    });
    const indexes = out.gpus.map((g) => g.index).filter((i) => i !== null);
    if (new Set(indexes).size !== indexes.length) abort('the same GPU index appears twice');
    out.driverVersion = at.driver < 0 ? null : textValue(get(table.rows[0] ?? [], at.driver));
    return out;
  });
}
