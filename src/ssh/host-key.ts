import { createHash } from 'node:crypto';
import { CodedError, ErrorCode } from '../errors.ts';

/**
 * `SHA256:` + unpadded base64 of sha256 over the raw key blob: exactly what
 * `ssh-keygen -l -f key.pub` prints, so operators can paste it into the inventory.
 */
export function hostKeyFingerprint(keyBlob: Uint8Array): string {
  const b64 = createHash('sha256').update(keyBlob).digest('base64');
  return `SHA256:${b64.replace(/=+$/, '')}`;
}

/** Fingerprint of an OpenSSH public key line (`ssh-ed25519 AAAA... comment`). */
export function publicKeyLineFingerprint(line: string): string {
  const blob = line.trim().split(/\s+/)[1];
  if (blob === undefined || !/^[A-Za-z0-9+/]+=*$/.test(blob)) {
    throw new Error('not an OpenSSH public key line');
  }
  return hostKeyFingerprint(Buffer.from(blob, 'base64'));
}

/** Pins in `SHA256:` form, padding stripped; anything else (MD5, typos) does not count as a pin. */
export function usablePins(pins: readonly string[]): string[] {
  return pins
    .map((p) => p.trim())
    .filter((p) => /^SHA256:[A-Za-z0-9+/]{43}=?$/.test(p))
    .map((p) => p.replace(/=+$/, ''));
}

/** The refusal for an endpoint without a usable pin: we never connect to learn a key (no TOFU). */
export function unpinnedError(machineId: string, host: string, port: number): CodedError {
  return new CodedError(
    ErrorCode.HostKeyUnpinned,
    `No pinned SSH host key for ${machineId} (${host}:${port}); not connecting. ` +
      `Add its fingerprint (ssh-keygen -l -f /etc/ssh/ssh_host_ed25519_key.pub on the machine) to the inventory.`,
    { machineId, host, port },
  );
}

/**
 * Pure check of a presented host key against the pins. Returns null when accepted, else the
 * error to fail with; the caller refuses the handshake, so nothing is authenticated or run.
 */
export function verifyHostKey(
  target: { machineId: string; host: string; port: number },
  pins: readonly string[],
  keyBlob: Uint8Array,
): CodedError | null {
  const expected = usablePins(pins);
  if (expected.length === 0) return unpinnedError(target.machineId, target.host, target.port);
  const seen = hostKeyFingerprint(keyBlob);
  if (expected.includes(seen)) return null;
  return new CodedError(
    ErrorCode.HostKeyMismatch,
    `SSH host key of ${target.machineId} (${target.host}:${target.port}) is ${seen}, ` +
      `expected ${expected.join(' or ')}; refused before logging in, nothing was run. ` +
      `If the machine was reinstalled, verify the new key out of band and update the inventory.`,
    { machineId: target.machineId, host: target.host, port: target.port, seen, expected: expected.join(',') },
  );
}
