/** The one parsing module: nvidia-smi (table, CSV, XML, errors), fuser and small machine files into typed values. Pure. */
export { parseNvidiaOutput, MAX_INPUT_CHARS } from './parse-nvidia-output.ts';
export type { ParseOptions } from './parse-nvidia-output.ts';
export { parseTable } from './parse-table.ts';
export { parseQueryGpuCsv, QUERY_GPU_FIELDS } from './parse-query-gpu-csv.ts';
export { parseComputeAppsCsv, COMPUTE_APPS_FIELDS } from './parse-compute-apps-csv.ts';
export { parseXml } from './parse-xml.ts';
export { parseFuser, parseFuserStreams } from './parse-fuser.ts';
export { detectNvidiaError } from './detect-nvidia-error.ts';
export { normaliseBusId } from './normalise-bus-id.ts';
export { parseFreeBytes, parseProcStat, parseNsPid, parsePctList, parsePctStatus } from './parse-machine-files.ts';
export type { ProcStat, PctContainer } from './parse-machine-files.ts';
export type { ParseFailure, ParseResult } from './parse-failure.ts';
