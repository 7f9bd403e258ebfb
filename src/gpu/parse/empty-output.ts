import type { OutputSource, ParsedOutput } from '../types.ts';

export function emptyOutput(source: OutputSource): ParsedOutput {
  return {
    source,
    driverVersion: null,
    cudaVersion: null,
    gpus: [],
    migDevices: [],
    processes: [],
    holders: [],
    kernelMounts: [],
    error: null,
  };
}
