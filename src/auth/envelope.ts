import { createHash, type KeyObject, randomBytes, sign, verify } from 'node:crypto';
import { z } from 'zod';

/**
 * Signed envelopes (no Redis writer can forge one): what the bot signs (an unstick request, a decision on a card) and
 * what the worker signs (the plan a card asks for). Ed25519 from node:crypto over a canonical
 * byte string, so a host-side agent can verify the same signature without gpu-medic's code:
 *
 *   printf '%s' "$body" > body; echo "$sig" | base64 -d > sig
 *   openssl pkeyutl -verify -pubin -inkey bot.pub.pem -rawin -in body -sigfile sig
 *
 * A body is UTF-8 text: a header line `gpu-medic <kind> v1`, then one `name=value` line per field
 * in a fixed order (each ending in "\n"); a value holds no newline. The plan's body is the header
 * line followed by its JSON. docs/security.md describes every field. Pure: keys are passed in.
 */
export interface Envelope {
  /** The exact bytes that were signed (UTF-8). */
  body: string;
  /** Ed25519 signature of `body`, base64. */
  sig: string;
}

export const EnvelopeSchema = z.object({ body: z.string().max(200_000), sig: z.string().max(200) });

/** The fields of each kind, in the order they are signed. */
export const FIELDS = {
  request: [
    'incident',
    'target',
    'host',
    'vmid',
    'gpu',
    'requester',
    'groups',
    'channel',
    'signed_at',
    'expires_at',
    'nonce',
  ],
  decision: [
    'approval',
    'incident',
    'plan',
    'decision',
    'decider',
    'groups',
    'channel',
    'signed_at',
    'expires_at',
    'nonce',
  ],
} as const;

/**
 * The version of each kind's header. Requests and decisions are v2 (agent/PROTOCOL.md): a request
 * names the host, the vmid and (for an alert's reset) the one GPU the bot resolved from its own
 * inventory, and both carry the signer's memberships (`groups`, empty when no teams are set). The
 * plan's header stays v1; its body's own `v` says its shape.
 */
const VERSION: Record<string, number> = { request: 2, decision: 2, plan: 1 };
export type EnvelopeKind = keyof typeof FIELDS;
export type Fields<K extends EnvelopeKind> = Record<(typeof FIELDS)[K][number], string>;

export function header(kind: string): string {
  return `gpu-medic ${kind} v${VERSION[kind] ?? 1}\n`;
}

export function newNonce(): string {
  return randomBytes(16).toString('base64url');
}

/** The SHA-256 of a body, hex: what a decision names the plan by. */
export function digestOf(body: string): string {
  return createHash('sha256').update(body, 'utf8').digest('hex');
}

export function signBody(body: string, privateKey: KeyObject): Envelope {
  return { body, sig: sign(null, Buffer.from(body, 'utf8'), privateKey).toString('base64') };
}

/** True when `env.sig` is a valid signature of `env.body` by one of `keys` (current first, then previous). */
export function verifiedBy(env: Envelope, keys: readonly KeyObject[]): boolean {
  if (!/^[A-Za-z0-9+/]{86}==$/.test(env.sig)) return false;
  const sig = Buffer.from(env.sig, 'base64');
  const data = Buffer.from(env.body, 'utf8');
  return keys.some((k) => {
    try {
      return verify(null, data, k, sig);
    } catch {
      return false;
    }
  });
}

export function canonical<K extends EnvelopeKind>(kind: K, f: Fields<K>): string {
  let out = header(kind);
  for (const name of FIELDS[kind]) {
    const v = f[name as keyof Fields<K>];
    if (typeof v !== 'string' || /[\n\r]/.test(v)) throw new Error(`envelope field ${name} is not one line`);
    out += `${name}=${v}\n`;
  }
  return out;
}

export function signFields<K extends EnvelopeKind>(kind: K, f: Fields<K>, privateKey: KeyObject): Envelope {
  return signBody(canonical(kind, f), privateKey);
}

export type Opened<K extends EnvelopeKind> = { ok: true; fields: Fields<K> } | { ok: false; why: string };

/** Verifies the signature, then reads the fields back in their fixed order; anything else is refused. */
export function openFields<K extends EnvelopeKind>(
  kind: K,
  env: Envelope | null,
  keys: readonly KeyObject[],
): Opened<K> {
  if (env === null) return { ok: false, why: `no signed ${kind} is stored` };
  if (!verifiedBy(env, keys))
    return {
      ok: false,
      why: `the ${kind} does not carry a valid signature of the bot (forged, altered, or another key)`,
    };
  const h = header(kind);
  if (!env.body.startsWith(h) || !env.body.endsWith('\n'))
    return { ok: false, why: `the signed text is not a ${kind}` };
  const lines = env.body.slice(h.length, -1).split('\n');
  const names = FIELDS[kind];
  if (lines.length !== names.length) return { ok: false, why: `the signed ${kind} has unexpected fields` };
  const out: Record<string, string> = {};
  for (const [i, name] of names.entries()) {
    const line = lines[i] ?? '';
    if (!line.startsWith(`${name}=`)) return { ok: false, why: `the signed ${kind} has unexpected fields` };
    out[name] = line.slice(name.length + 1);
  }
  return { ok: true, fields: out as Fields<K> };
}
