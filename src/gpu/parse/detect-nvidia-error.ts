import type { NvidiaError, NvidiaErrorKind } from '../types.ts';
import { findBusId, normaliseBusId } from './normalise-bus-id.ts';

const BUS = '((?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\\.[0-7])';

interface Rule {
  kind: NvidiaErrorKind;
  pattern: RegExp;
}

// Order matters: the more specific text first (e.g. "GPU is lost" also reads "Unable to determine the device handle").
const RULES: readonly Rule[] = [
  { kind: 'nvml_version_mismatch', pattern: /Driver\/library version mismatch/ },
  { kind: 'driver_unreachable', pattern: /couldn't communicate with the NVIDIA driver/ },
  { kind: 'gpu_lost', pattern: /GPU is lost/ },
  { kind: 'inforom_corrupted', pattern: new RegExp(`infoROM is corrupted at gpu ${BUS}`) },
  {
    kind: 'device_handle_unknown',
    pattern: new RegExp(`Unable to determine the device handle for GPU\\s?${BUS}: Unknown Error`),
  },
  { kind: 'insufficient_permissions', pattern: /Insufficient Permissions/i },
  { kind: 'reset_not_supported', pattern: new RegExp(`Resetting GPU ${BUS} is not supported`) },
  { kind: 'reset_in_use', pattern: new RegExp(`could not be reset:\\s*GPU ${BUS}: In use by another client`) },
  { kind: 'no_devices', pattern: /^No devices were found\s*$/m },
];

/** nvidia-smi(1) exit codes that name a failure on their own (NVML return codes). */
const KIND_BY_EXIT_CODE: ReadonlyMap<number, NvidiaErrorKind> = new Map([
  [4, 'insufficient_permissions'],
  [6, 'no_devices'],
  [9, 'driver_unreachable'],
  [14, 'inforom_corrupted'],
  [15, 'gpu_lost'],
  [18, 'nvml_version_mismatch'],
]);

function firstLines(text: string): string {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !/^exit=\d+$/.test(l))
    .slice(0, 8)
    .join(' ')
    .slice(0, 500);
}

/** A known nvidia-smi failure message in `text`, or null. */
export function detectNvidiaError(text: string): NvidiaError | null {
  for (const rule of RULES) {
    const m = rule.pattern.exec(text);
    if (m === null) continue;
    const busId = m[1] !== undefined ? normaliseBusId(m[1]) : rule.kind === 'gpu_lost' ? findBusId(text) : null;
    const message = rule.kind === 'inforom_corrupted' ? m[0].trim() : firstLines(text);
    return { kind: rule.kind, message, busId };
  }
  return null;
}

/** Error implied by a non-zero exit code when the text says nothing recognisable. */
export function errorFromExitCode(exitCode: number, text: string): NvidiaError {
  const said = firstLines(text);
  return {
    kind: KIND_BY_EXIT_CODE.get(exitCode) ?? 'unknown',
    message:
      said === ''
        ? `nvidia-smi exited with code ${exitCode} and printed nothing`
        : `nvidia-smi exited with code ${exitCode}: ${said}`,
    busId: findBusId(said),
  };
}

/** `GPU 00000000:01:00.0 was successfully reset.` lines: the bus ids reset, or null when the text is not that. */
export function detectResetSuccess(text: string): string[] | null {
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
  if (lines.length < 1 || lines.at(-1) !== 'All done.') return null;
  const ids: string[] = [];
  for (const line of lines.slice(0, -1)) {
    const m = new RegExp(`^GPU ${BUS} was successfully reset\\.$`).exec(line);
    const id = m?.[1] === undefined ? null : normaliseBusId(m[1]);
    if (id === null) return null;
    ids.push(id);
  }
  return ids;
}
