import type { MachineSnapshot } from './snapshot.ts';
import type { NvidiaErrorKind } from './types.ts';

/**
 * A snapshot that was read but whose GPUs were not (nvidia-smi in error, a GPU whose memory could
 * not be read) is not a success: `status` must not end green, `incidents` must not say `ok`.
 * Pure.
 */
export interface GpuTrouble {
  kind: NvidiaErrorKind | 'unreadable';
  /** Short plain words: `GPU is lost`, `driver/library version mismatch`, `GPU 3 memory unreadable`. */
  label: string;
}

const LABELS: Record<NvidiaErrorKind, string> = {
  nvml_version_mismatch: 'driver/library version mismatch',
  driver_unreachable: 'driver not reachable',
  no_devices: 'no GPUs found',
  device_handle_unknown: 'GPU unreachable (Unknown Error)',
  gpu_lost: 'GPU is lost',
  inforom_corrupted: 'infoROM corrupted',
  insufficient_permissions: 'nvidia-smi permission denied',
  reset_not_supported: 'reset not supported',
  reset_in_use: 'reset refused (in use)',
  unknown: 'nvidia-smi failed',
};

/** What is wrong with a snapshot's GPUs, or null when every GPU was read. */
export function gpuTroubleOf(s: Pick<MachineSnapshot, 'gpus' | 'gpuError'>): GpuTrouble | null {
  if (s.gpuError) return { kind: s.gpuError.kind, label: LABELS[s.gpuError.kind] };
  const unreadable = s.gpus.filter((g) => g.memoryUsedMiB === null);
  if (unreadable.length > 0)
    return { kind: 'unreadable', label: `GPU ${unreadable.map((g) => g.index ?? '?').join(', ')} memory unreadable` };
  return null;
}
