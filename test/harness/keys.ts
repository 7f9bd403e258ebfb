import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type KeyPair, newKeyPair } from '../../src/auth/keys.ts';

/**
 * Signing keys, so the worker acts only on what the bot signed: a bot and a worker key pair, new for this
 * test, written as PEM files into `dir`, and the settings each role gets (docs/security.md): the bot its
 * private key and the worker's public key, the worker its private key and the bot's public key.
 */
export interface TestKeys {
  bot: KeyPair;
  worker: KeyPair;
  files: string[];
  botEnv: Record<string, string>;
  workerEnv: Record<string, string>;
}

export function writeTestKeys(dir: string, name: string): TestKeys {
  const files: string[] = [];
  const write = (role: string, pair: KeyPair) => {
    const priv = join(dir, `gpu-medic-${name}-${role}.key.pem`);
    const pub = join(dir, `gpu-medic-${name}-${role}.pub.pem`);
    writeFileSync(priv, pair.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    writeFileSync(pub, pair.publicKey.export({ type: 'spki', format: 'pem' }));
    files.push(priv, pub);
    return { priv, pub };
  };
  const bot = newKeyPair();
  const worker = newKeyPair();
  const b = write('bot', bot);
  const w = write('worker', worker);
  return {
    bot,
    worker,
    files,
    botEnv: { GPU_MEDIC_BOT_KEY_FILE: b.priv, GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: w.pub },
    workerEnv: { GPU_MEDIC_WORKER_KEY_FILE: w.priv, GPU_MEDIC_BOT_PUBLIC_KEY_FILES: b.pub },
  };
}
