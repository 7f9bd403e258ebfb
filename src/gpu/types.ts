/** Typed readings of nvidia-smi / fuser output. Shapes match the `parse --json` contract. */

export type OutputSource = 'table' | 'csv' | 'xml' | 'fuser' | 'error';

export interface Gpu {
  index: number | null;
  name: string | null;
  /** Normalised to the 8-hex-digit domain form, upper-case: `00000000:0B:00.0`. */
  busId: string | null;
  uuid: string | null;
  memoryUsedMiB: number | null;
  memoryTotalMiB: number | null;
  utilizationPct: number | null;
}

export interface MigDevice {
  gpuIndex: number;
  gi: number;
  ci: number;
  migDevice: number;
  memoryUsedMiB: number | null;
  memoryTotalMiB: number | null;
}

/** A compute process as nvidia-smi reports it: PIDs are host PIDs (the driver is not PID-namespace aware). */
export interface GpuProcess {
  gpuIndex: number | null;
  gpuUuid: string | null;
  pid: number;
  type: string | null;
  name: string | null;
  usedMiB: number | null;
}

/** A `fuser -v /dev/nvidia*` holder row: PIDs are in the namespace fuser ran in. */
export interface Holder {
  device: string;
  pid: number;
  user: string | null;
  access: string | null;
  command: string | null;
}

export type NvidiaErrorKind =
  | 'nvml_version_mismatch'
  | 'driver_unreachable'
  | 'no_devices'
  | 'device_handle_unknown'
  | 'gpu_lost'
  | 'inforom_corrupted'
  | 'insufficient_permissions'
  | 'reset_not_supported'
  | 'reset_in_use'
  | 'unknown';

export interface NvidiaError {
  kind: NvidiaErrorKind;
  message: string;
  busId: string | null;
}

export interface ParsedOutput {
  source: OutputSource;
  driverVersion: string | null;
  cudaVersion: string | null;
  gpus: Gpu[];
  migDevices: MigDevice[];
  processes: GpuProcess[];
  holders: Holder[];
  /** Devices that fuser reported as `kernel mount` (bind mounts, never processes). */
  kernelMounts: string[];
  error: NvidiaError | null;
}

/** Host memory as read from `free -b`. */
export interface HostMemory {
  totalBytes: number;
  usedBytes: number;
  availableBytes: number | null;
}

export type Result<T, E> = { ok: true; value: T } | { ok: false; error: E };
