import type { GpuProcess, ParsedOutput } from '../types.ts';
import { intValue, readCsv, textValue } from './csv-table.ts';
import { detectNvidiaError } from './detect-nvidia-error.ts';
import { emptyOutput } from './empty-output.ts';
import { abort, guard, type ParseResult } from './parse-failure.ts';

/** `--query-compute-apps` fields (nvidia-smi --help-query-compute-apps) and their header unit. */
export const COMPUTE_APPS_FIELD_UNITS: ReadonlyMap<string, string> = new Map([
  ['timestamp', ''],
  ['gpu_name', ''],
  ['gpu_bus_id', ''],
  ['gpu_serial', ''],
  ['gpu_uuid', ''],
  ['pid', ''],
  ['process_name', ''],
  ['name', ''],
  ['used_gpu_memory', 'MiB'],
  ['used_memory', 'MiB'],
]);

export const COMPUTE_APPS_FIELDS: ReadonlySet<string> = new Set(COMPUTE_APPS_FIELD_UNITS.keys());

/**
 * `--query-compute-apps=... --format=csv[,noheader][,nounits]`. Header only, or nothing at all
 * with `noheader`, means no compute process. PIDs are host PIDs.
 */
export function parseComputeAppsCsv(text: string, fields: readonly string[] | null): ParseResult<ParsedOutput> {
  const error = detectNvidiaError(text);
  if (error !== null) return { ok: true, value: { ...emptyOutput('error'), error } };
  return guard(() => {
    if (fields !== null && text.trim() === '') return emptyOutput('csv');
    const table = readCsv(text, fields, COMPUTE_APPS_FIELDS);
    const col = (...names: string[]): number => table.fields.findIndex((f) => names.includes(f));
    const at = {
      uuid: col('gpu_uuid'),
      pid: col('pid'),
      name: col('process_name', 'name'),
      used: col('used_gpu_memory', 'used_memory'),
    };
    if (at.pid < 0) abort('the compute-apps CSV has no pid field');
    const out = emptyOutput('csv');
    out.processes = table.rows.map((row): GpuProcess => {
      const pid = intValue(row[at.pid] ?? '', null, 'pid');
      if (pid === null || pid === 0) abort('a compute app has no PID');
      const uuid = at.uuid < 0 ? null : textValue(row[at.uuid] ?? '');
      if (uuid !== null && !/^(GPU|MIG)-[0-9a-fA-F-]+$/.test(uuid)) abort(`unreadable GPU UUID "${uuid.slice(0, 50)}"`);
      return {
        gpuIndex: null,
        gpuUuid: uuid,
        pid,
        type: null,
        name: at.name < 0 ? null : textValue(row[at.name] ?? ''),
        usedMiB: at.used < 0 ? null : intValue(row[at.used] ?? '', table.units[at.used] ?? 'MiB', 'used memory'),
      };
    });
    return out;
  });
}
