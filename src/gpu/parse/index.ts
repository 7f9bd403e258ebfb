/** The one parsing module: nvidia-smi (table, CSV, XML, errors), fuser and small machine files into typed values. Pure. */
export { parseNvidiaOutput, MAX_INPUT_CHARS } from './parse-nvidia-output.ts';
export { parseQueryGpuCsv } from './parse-query-gpu-csv.ts';
export { parseComputeAppsCsv } from './parse-compute-apps-csv.ts';
export { parseFuser, parseFuserStreams } from './parse-fuser.ts';
export { normaliseBusId } from './normalise-bus-id.ts';
export { parseFreeBytes, parseProcStat, parseNsPid, parsePctList, parsePctStatus } from './parse-machine-files.ts';
export type { ProcStat } from './parse-machine-files.ts';
