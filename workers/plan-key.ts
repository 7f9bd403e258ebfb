import { hkdfSync, randomBytes } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import type { Inventory } from '../src/config/inventory.ts';
import type { Logger } from '../src/logger.ts';

/**
 * The key of the plan seal (src/plan/plan-seal.ts): something only workers hold.
 * GPU_MEDIC_WORKER_SECRET when set (every worker of a site must have the same one); else derived
 * from the SSH private keys the inventory names, which workers hold and the bot never does (one
 * way, with its own label: the seal key says nothing about the SSH keys); else a random key for
 * this process only, said loudly: approvals then survive neither a worker restart nor another
 * worker picking up the decision (they are refused, never run unchecked).
 */
export function planKeyFor(secret: string | undefined, inventory: Inventory, logger: Logger): Buffer {
  const derive = (ikm: Buffer, from: string): Buffer =>
    Buffer.from(hkdfSync('sha256', ikm, `gpu-medic ${from}`, 'plan seal v1', 32));
  if (secret !== undefined && secret !== '') return derive(Buffer.from(secret, 'utf8'), 'worker secret');
  const files = [
    inventory.defaults.keyFile,
    ...inventory.hosts.map((h) => h.keyFile),
    ...inventory.containers.map((c) => c.keyFile),
  ];
  const paths = [...new Set(files.filter((f): f is string => typeof f === 'string' && f !== ''))].sort();
  // Regular files only: a FIFO or device would block the start, and is not a stable key anyway.
  const readable = paths.filter((p) => {
    try {
      const st = statSync(p);
      return st.isFile() && st.size > 0 && st.size <= 64 * 1024;
    } catch {
      return false;
    }
  });
  try {
    if (readable.length > 0) return derive(Buffer.concat(readable.map((p) => readFileSync(p))), 'ssh keys');
  } catch (err) {
    logger.warn(
      { err: { message: (err as Error).message } },
      'could not read the SSH key files to derive the plan seal key',
    );
  }
  logger.warn(
    'GPU_MEDIC_WORKER_SECRET is not set and no SSH key file could be read: approvals are sealed with a key of this process only (a restarted or another worker refuses them)',
  );
  return randomBytes(32);
}
