/** Writers of nvidia-smi / free output formats, shared by the test fleet's fake tools and the round-trip tests. */
export { formatTable, tableGpuName, tableProcessName } from './format-table.ts';
export type { FormatTableOptions, TableGpuDetails, TableMigDetails, TableProcessPlacement } from './format-table.ts';
export { formatQueryGpuCsv } from './format-query-gpu-csv.ts';
export { formatComputeAppsCsv, COMPUTE_APPS_FIELD_UNITS } from './format-compute-apps-csv.ts';
export type { CsvFormatOptions } from './csv-options.ts';
export { InvalidQueryFieldError } from './invalid-query-field-error.ts';
export { QUERY_GPU_FIELD_UNITS } from './query-gpu-fields.ts';
export { formatXml } from './format-xml.ts';
export type { FormatXmlOptions } from './format-xml.ts';
export { formatNvidiaError, formatGpuResetSuccess } from './format-nvidia-error.ts';
export type { CommandOutput, FormatNvidiaErrorOptions } from './format-nvidia-error.ts';
export { formatFreeBytes } from './format-free-bytes.ts';
export { formatSnapshotText } from './format-snapshot-text.ts';
