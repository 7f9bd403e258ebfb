import type { NvidiaErrorKind } from '../../../src/gpu/types.ts';
import { shortBusId } from './text-layout.ts';

/** What a failing nvidia-smi run prints. nvidia-smi writes its errors to stdout, not stderr. */
export interface CommandOutput {
  stdout: string;
  stderr: string;
  exitCode: number;
}

export interface FormatNvidiaErrorOptions {
  /** Second line of the version-mismatch error (`NVML library version: 570.124`, newer drivers); omitted when absent. */
  nvmlLibraryVersion?: string;
}

const DEFAULT_BUS_ID = '00000000:01:00.0';

// Exit codes are NVML return codes, as listed in nvidia-smi(1) "RETURN VALUE".
const EXIT = {
  notSupported: 3,
  noPermission: 4,
  notFound: 6,
  driverNotLoaded: 9,
  infoRomCorrupted: 14,
  gpuLost: 15,
  libRmVersionMismatch: 18,
  other: 255,
} as const;

const IN_USE_EXPLANATION =
  'device is currently being used by one or more other processes (e.g. Fabric\n' +
  'Manager, CUDA application, graphics application such as an X server, or a\n' +
  'monitoring application such as another instance of nvidia-smi). Please first kill\n' +
  'all processes using this device and all compute applications running in the\n' +
  'system.\n';

function out(stdout: string, exitCode: number): CommandOutput {
  return { stdout, stderr: '', exitCode };
}

/**
 * The exact text and exit code nvidia-smi gives for each error kind (texts from
 * fixtures/nvidia-smi/errors). `inforom_corrupted` is only the trailing warning: the real tool
 * prints the full table first, so callers prepend {@link formatTable}'s output.
 */
export function formatNvidiaError(
  kind: NvidiaErrorKind,
  busId?: string | null,
  opts: FormatNvidiaErrorOptions = {},
): CommandOutput {
  const bus = busId ?? DEFAULT_BUS_ID;
  switch (kind) {
    case 'nvml_version_mismatch':
      return out(
        'Failed to initialize NVML: Driver/library version mismatch\n' +
          (opts.nvmlLibraryVersion === undefined ? '' : `NVML library version: ${opts.nvmlLibraryVersion}\n`),
        EXIT.libRmVersionMismatch,
      );
    case 'driver_unreachable':
      return out(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n",
        EXIT.driverNotLoaded,
      );
    case 'no_devices':
      return out('No devices were found\n', EXIT.notFound);
    case 'device_handle_unknown':
      return out(`Unable to determine the device handle for GPU${shortBusId(bus)}: Unknown Error\n`, EXIT.other);
    case 'gpu_lost':
      return out(
        `Unable to determine the device handle for GPU${shortBusId(bus)}: GPU is lost.  Reboot the system to recover this GPU\n`,
        EXIT.gpuLost,
      );
    case 'inforom_corrupted':
      return out(`WARNING: infoROM is corrupted at gpu ${shortBusId(bus)}\n`, EXIT.infoRomCorrupted);
    case 'insufficient_permissions':
      return out('Failed to initialize NVML: Insufficient Permissions\n', EXIT.noPermission);
    case 'reset_not_supported':
      return out(`Resetting GPU ${bus} is not supported.\n`, EXIT.notSupported);
    case 'reset_in_use':
      return out(
        `The following GPUs could not be reset:\n  GPU ${bus}: In use by another client\n\n1 ${IN_USE_EXPLANATION}`,
        EXIT.other,
      );
    case 'unknown':
      return out('Unknown Error\n', EXIT.other);
  }
}

/** `nvidia-smi -r` that worked: one line per GPU, then `All done.`, exit 0. */
export function formatGpuResetSuccess(busIds: readonly string[]): CommandOutput {
  return out(`${busIds.map((b) => `GPU ${b} was successfully reset.\n`).join('')}All done.\n`, 0);
}
