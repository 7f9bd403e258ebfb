import { createHmac, type KeyObject, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { digestOf, header, signBody, verifiedBy } from '../auth/envelope.ts';
import type { Step, StepTarget, TargetGpu } from './unstick-plan.ts';

/**
 * The plan a worker asks a second person to approve, signed with the worker's Ed25519 private key
 * (the bot holds only the public key, so it can check what it shows on a card and cannot
 * forge one), and sealed as well with a key only workers hold
 * (GPU_MEDIC_WORKER_SECRET, or one derived from the workers' SSH keys). Redis keeps it, but the
 * bot (or anyone else who can write Redis) cannot change it undetected: a worker acting on an
 * approval opens the seal, and rebuilds every command from its own templates from what it sealed
 * (the identity set and GPU identities), never from argv read back from Redis. Pure: the key is
 * passed in.
 */

/** What an approval approves, without any command: commands are rebuilt from templates when it runs. */
export interface SealedStep {
  /** 3: the plan names the host it was made for and its quorum (agent/PROTOCOL.md). */
  v: 3;
  incidentId: string;
  approvalId: string;
  /** Who asked (the signed request's requester): never the one who may approve it. */
  requester: string;
  /** When the card was made and until when it may be decided (ms since epoch): time is part of the seal. */
  createdAt: number;
  expiresAt: number;
  /** Who may approve it, frozen when it was asked for. */
  approvers: string[];
  /** Past the blast-radius budget when asked for: only an admin may approve it, whatever Redis says of the budget later. */
  adminOnly: boolean;
  /** The escalation group and from when (ms) it may decide; null: none. */
  escalation: { approvers: string[]; at: number } | null;
  /** The target container (inventory id) and its Proxmox id, as the worker resolved them. */
  container: string;
  vmid: number;
  /** The inventory id of the Proxmox host the plan was made for: that host's agent alone acts on it. */
  host: string;
  /** How many distinct approvers must decide (1 today; the teams' quorum later). */
  quorum: number;
  step: Omit<Step, 'commands'>;
}

export interface Seal {
  /** `gpu-medic plan v1` and a newline, then the canonical JSON of the SealedStep. */
  body: string;
  /** HMAC-SHA256 of `body`, hex (the workers' shared key). */
  mac: string;
  /** Ed25519 signature of `body` by the worker's private key, base64. */
  sig: string;
}

const PLAN_HEADER = header('plan');

/** What a decision names the plan by: the SHA-256 of the signed body, hex. */
export function planDigest(seal: Pick<Seal, 'body'>): string {
  return digestOf(seal.body);
}

const int = z.number().int();
const Gpu = z
  .object({
    index: int.nullable(),
    hostIndex: int.nullable(),
    uuid: z.string().nullable(),
    usedMiB: z.number().nullable(),
  })
  .passthrough();
const Target = z
  .object({
    hostPid: int.positive(),
    containerPid: int.positive(),
    startTimeTicks: int.nonnegative(),
    cmdline: z.string(),
    pidNs: z.string(),
    gpus: z.array(Gpu),
    hostOnlyWhy: z.string().nullable(),
  })
  .passthrough();
const Body = z.object({
  v: z.literal(3),
  incidentId: z.string(),
  approvalId: z.string(),
  requester: z.string(),
  createdAt: int,
  expiresAt: int,
  approvers: z.array(z.string()),
  adminOnly: z.boolean(),
  escalation: z.object({ approvers: z.array(z.string()), at: int }).nullable(),
  container: z.string(),
  vmid: int.positive(),
  host: z.string(),
  quorum: int.min(1).max(4),
  step: z
    .object({
      id: z.string(),
      tier: z.union([z.literal(1), z.literal(2)]),
      kind: z.enum(['container_signal', 'host_kill', 'host_reset']),
      machineId: z.string(),
      targets: z.array(Target),
      gpus: z.array(Gpu),
      explanation: z.string(),
      graceMs: int.nonnegative(),
      releaseTimeoutMs: int.nonnegative(),
      pollIntervalMs: int.positive(),
    })
    .passthrough(),
});

function macOf(key: Buffer, body: string): string {
  return createHmac('sha256', key).update('gpu-medic sealed step v1\n').update(body).digest('hex');
}

export function sealStep(
  s: Omit<SealedStep, 'v' | 'step' | 'quorum'> & { step: Step; quorum?: number },
  key: Buffer,
  signingKey: KeyObject,
): Seal {
  const { commands: _commands, ...step } = s.step;
  const sealed: SealedStep = {
    v: 3,
    incidentId: s.incidentId,
    approvalId: s.approvalId,
    requester: s.requester,
    createdAt: s.createdAt,
    expiresAt: s.expiresAt,
    approvers: [...s.approvers],
    adminOnly: s.adminOnly,
    escalation: s.escalation ? { approvers: [...s.escalation.approvers], at: s.escalation.at } : null,
    container: s.container,
    vmid: s.vmid,
    host: s.host,
    quorum: s.quorum ?? 1,
    step,
  };
  const body = PLAN_HEADER + JSON.stringify(sealed);
  return { body, mac: macOf(key, body), sig: signBody(body, signingKey).sig };
}

export type OpenResult = { ok: true; sealed: SealedStep } | { ok: false; why: string };

/**
 * Verifies the worker's signature (with the workers' public keys: current, then previous) and its
 * shape; with `key` (a worker) the workers' seal too. Anything else (missing, altered, another key)
 * is refused. The bot calls it with its worker public keys and no seal key.
 */
export function openSeal(seal: Seal | null, publicKeys: readonly KeyObject[], key?: Buffer): OpenResult {
  if (seal === null) return { ok: false, why: 'no sealed plan is stored with this approval' };
  if (!verifiedBy({ body: seal.body, sig: seal.sig }, publicKeys))
    return {
      ok: false,
      why: "the stored plan does not carry a valid worker signature (altered, or another worker's key)",
    };
  if (key !== undefined) {
    const want = Buffer.from(macOf(key, seal.body), 'hex');
    const got = /^[0-9a-f]{64}$/.test(seal.mac) ? Buffer.from(seal.mac, 'hex') : Buffer.alloc(0);
    if (got.length !== want.length || !timingSafeEqual(got, want))
      return {
        ok: false,
        why: 'the stored plan does not carry a valid worker seal (altered, or sealed with another key)',
      };
  }
  if (!seal.body.startsWith(PLAN_HEADER)) return { ok: false, why: 'the sealed plan is not readable' };
  let raw: unknown;
  try {
    raw = JSON.parse(seal.body.slice(PLAN_HEADER.length));
  } catch {
    return { ok: false, why: 'the sealed plan is not readable' };
  }
  const b = Body.safeParse(raw);
  if (!b.success) return { ok: false, why: 'the sealed plan has an unexpected shape' };
  const { step } = b.data;
  const targets: StepTarget[] = step.targets.map((t) => ({ ...t, gpus: t.gpus.map((g): TargetGpu => ({ ...g })) }));
  const gpus: TargetGpu[] = step.gpus.map((g) => ({ ...g }));
  return { ok: true, sealed: { ...b.data, approvers: [...b.data.approvers], step: { ...step, targets, gpus } } };
}
