import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';

/**
 * The two signing roles' keys (docs/security.md): the bot signs requests and decisions with its
 * private key, the worker verifies them with the bot's public key(s); the worker signs plans with
 * its own private key, the bot verifies them with the worker's public key(s). No signing key is
 * shared between roles. Files are PEM (`openssl genpkey -algorithm ed25519`); a list of public key
 * files is the current key first, then the previous one(s) still accepted during a rotation.
 */

export type KeyLoad<T> = { ok: true; value: T } | { ok: false; why: string };

function readPem(path: string): KeyLoad<string> {
  try {
    const st = statSync(path);
    if (!st.isFile()) return { ok: false, why: `${path} is not a regular file` };
    if (st.size > 16 * 1024) return { ok: false, why: `${path} is too large to be a key file` };
    return { ok: true, value: readFileSync(path, 'utf8') };
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return {
      ok: false,
      why:
        code === 'ENOENT'
          ? `${path} does not exist`
          : code === 'EACCES'
            ? `${path} is not readable by this user`
            : `${path} cannot be read (${code ?? 'error'})`,
    };
  }
}

/** An Ed25519 private key from a PEM file. The key's text is never part of a message. */
function loadPrivateKey(path: string): KeyLoad<KeyObject> {
  const pem = readPem(path);
  if (!pem.ok) return pem;
  try {
    const k = createPrivateKey(pem.value);
    if (k.asymmetricKeyType !== 'ed25519') return { ok: false, why: `${path} is not an Ed25519 private key` };
    return { ok: true, value: k };
  } catch {
    return {
      ok: false,
      why: `${path} is not a PEM private key (make one with \`openssl genpkey -algorithm ed25519\`)`,
    };
  }
}

/** Ed25519 public keys from PEM files (a private key file is accepted and its public half used). */
function loadPublicKeys(paths: readonly string[]): KeyLoad<KeyObject[]> {
  const out: KeyObject[] = [];
  for (const path of paths) {
    const pem = readPem(path);
    if (!pem.ok) return pem;
    try {
      const k = createPublicKey(pem.value);
      if (k.asymmetricKeyType !== 'ed25519') return { ok: false, why: `${path} is not an Ed25519 public key` };
      out.push(k);
    } catch {
      return { ok: false, why: `${path} is not a PEM public key (\`openssl pkey -in key.pem -pubout\`)` };
    }
  }
  return { ok: true, value: out };
}

export interface KeyPair {
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export function newKeyPair(): KeyPair {
  return generateKeyPairSync('ed25519');
}

let ephemeral: { bot: KeyPair; worker: KeyPair } | null = null;

/**
 * Keys of this process only, for a role whose key files are not set: `npm start` (both roles in
 * one process) then works with no setup, and gives up what docs/security.md says. A bot and a
 * worker in different processes never share these, so a split deployment without key files
 * refuses every request (nothing runs unverified).
 */
function processKeys(): { bot: KeyPair; worker: KeyPair } {
  ephemeral ??= { bot: newKeyPair(), worker: newKeyPair() };
  return ephemeral;
}

/** What each role signs with and verifies with. */
export interface BotKeys {
  /** Signs requests and decisions. */
  signing: KeyObject;
  /** Verify the worker's plans: current first, then previous. */
  workerPublic: KeyObject[];
}

export interface WorkerKeys {
  /** Signs plans. */
  signing: KeyObject;
  /** Verify the worker's own plans (its own public key, then the configured previous ones). */
  workerPublic: KeyObject[];
  /** Verify requests and decisions: current first, then previous. */
  botPublic: KeyObject[];
}

export interface KeySettings {
  GPU_MEDIC_BOT_KEY_FILE?: string | undefined;
  GPU_MEDIC_BOT_PUBLIC_KEY_FILES: string[];
  GPU_MEDIC_WORKER_KEY_FILE?: string | undefined;
  GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: string[];
}

export function botKeysOf(s: KeySettings): KeyLoad<BotKeys> {
  const p = processKeys();
  const signing = s.GPU_MEDIC_BOT_KEY_FILE
    ? loadPrivateKey(s.GPU_MEDIC_BOT_KEY_FILE)
    : { ok: true as const, value: p.bot.privateKey };
  if (!signing.ok) return { ok: false, why: `GPU_MEDIC_BOT_KEY_FILE: ${signing.why}` };
  const pub =
    s.GPU_MEDIC_WORKER_PUBLIC_KEY_FILES.length > 0
      ? loadPublicKeys(s.GPU_MEDIC_WORKER_PUBLIC_KEY_FILES)
      : { ok: true as const, value: [p.worker.publicKey] };
  if (!pub.ok) return { ok: false, why: `GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: ${pub.why}` };
  return { ok: true, value: { signing: signing.value, workerPublic: pub.value } };
}

export function workerKeysOf(s: KeySettings): KeyLoad<WorkerKeys> {
  const p = processKeys();
  const signing = s.GPU_MEDIC_WORKER_KEY_FILE
    ? loadPrivateKey(s.GPU_MEDIC_WORKER_KEY_FILE)
    : { ok: true as const, value: p.worker.privateKey };
  if (!signing.ok) return { ok: false, why: `GPU_MEDIC_WORKER_KEY_FILE: ${signing.why}` };
  const previous = loadPublicKeys(s.GPU_MEDIC_WORKER_PUBLIC_KEY_FILES);
  if (!previous.ok) return { ok: false, why: `GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: ${previous.why}` };
  const bot =
    s.GPU_MEDIC_BOT_PUBLIC_KEY_FILES.length > 0
      ? loadPublicKeys(s.GPU_MEDIC_BOT_PUBLIC_KEY_FILES)
      : { ok: true as const, value: [p.bot.publicKey] };
  if (!bot.ok) return { ok: false, why: `GPU_MEDIC_BOT_PUBLIC_KEY_FILES: ${bot.why}` };
  return {
    ok: true,
    value: {
      signing: signing.value,
      workerPublic: [createPublicKey(signing.value), ...previous.value],
      botPublic: bot.value,
    },
  };
}

/** What `config check` says of the key files a role would start with (empty: fine, or none set). */
export function keyProblems(s: KeySettings, role: 'bot' | 'worker' | 'start'): string[] {
  const out: string[] = [];
  if (role !== 'worker') {
    const b = botKeysOf(s);
    if (!b.ok) out.push(b.why);
  }
  if (role !== 'bot') {
    const w = workerKeysOf(s);
    if (!w.ok) out.push(w.why);
  }
  return [...new Set(out)];
}
