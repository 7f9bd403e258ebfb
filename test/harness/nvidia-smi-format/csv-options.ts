/** `--format=csv[,noheader][,nounits]` as writer options. */
export interface CsvFormatOptions {
  /** False for `noheader`. */
  header: boolean;
  /** False for `nounits`: values lose their unit, the header keeps it. */
  units: boolean;
  /** Value of the `timestamp` field; `[N/A]` when absent. */
  timestamp?: Date;
  /** Value of the `driver_version` field; `[N/A]` when absent. */
  driverVersion?: string | null;
  /** `persistence_mode` per GPU, by its position in the list (`Enabled`/`Disabled`); `[N/A]` when absent. */
  persistenceModes?: ReadonlyArray<boolean>;
  /** `gpu_recovery_action` per GPU, by its position in the list (`None`, `GPU Reset`, ...); `[N/A]` when absent. */
  recoveryActions?: ReadonlyArray<string>;
}

/** Placeholder nvidia-smi prints in CSV for a reading it doesn't have. */
export const CSV_NA = '[N/A]';

export function csvHeaderCell(field: string, unit: string): string {
  return unit === '' ? field : `${field} [${unit}]`;
}

export function csvValue(value: string | number | null, unit: string, units: boolean): string {
  if (value === null) return CSV_NA;
  const text = String(value);
  return units && unit !== '' ? `${text} ${unit}` : text;
}

export function csvLines(rows: string[][]): string {
  return rows.map((r) => `${r.join(', ')}\n`).join('');
}
