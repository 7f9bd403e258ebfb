/** Writers of nvidia-smi / free output formats, shared by the test fleet's fake tools and the round-trip tests. */
export { formatTable, tableGpuName, tableProcessName } from './format-table.ts';
export { formatQueryGpuCsv } from './format-query-gpu-csv.ts';
export { formatComputeAppsCsv } from './format-compute-apps-csv.ts';
export { InvalidQueryFieldError } from './invalid-query-field-error.ts';
export { formatXml } from './format-xml.ts';
export { formatNvidiaError, formatGpuResetSuccess } from './format-nvidia-error.ts';
export type { CommandOutput } from './format-nvidia-error.ts';
export { formatFreeBytes } from './format-free-bytes.ts';
