import { createHmac, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import type { Step, StepTarget, TargetGpu } from './unstick-plan.ts';

/**
 * The plan a worker asks a second person to approve, sealed with a key only workers hold
 * (GPU_MEDIC_WORKER_SECRET, or one derived from the workers' SSH keys). Redis keeps it, but the
 * bot (or anyone else who can write Redis) cannot change it undetected: a worker acting on an
 * approval opens the seal, and rebuilds every command from its own templates from what it sealed
 * (the identity set and GPU identities), never from argv read back from Redis. Pure: the key is
 * passed in.
 */

/** What an approval approves, without any command: commands are rebuilt from templates when it runs. */
export interface SealedStep {
  v: 1;
  incidentId: string;
  approvalId: string;
  /** The target container (inventory id) and its Proxmox id, as the worker resolved them. */
  container: string;
  vmid: number;
  step: Omit<Step, 'commands'>;
}

export interface Seal {
  /** Canonical JSON of the SealedStep. */
  body: string;
  /** HMAC-SHA256 of `body`, hex. */
  mac: string;
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
  v: z.literal(1),
  incidentId: z.string(),
  approvalId: z.string(),
  container: z.string(),
  vmid: int.positive(),
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

export function sealStep(s: Omit<SealedStep, 'v' | 'step'> & { step: Step }, key: Buffer): Seal {
  const { commands: _commands, ...step } = s.step;
  const sealed: SealedStep = {
    v: 1,
    incidentId: s.incidentId,
    approvalId: s.approvalId,
    container: s.container,
    vmid: s.vmid,
    step,
  };
  const body = JSON.stringify(sealed);
  return { body, mac: macOf(key, body) };
}

export type OpenResult = { ok: true; sealed: SealedStep } | { ok: false; why: string };

/** Verifies the seal and its shape; anything else (missing, altered, another key) is refused. */
export function openSeal(seal: Seal | null, key: Buffer): OpenResult {
  if (seal === null) return { ok: false, why: 'no sealed plan is stored with this approval' };
  const want = Buffer.from(macOf(key, seal.body), 'hex');
  const got = /^[0-9a-f]{64}$/.test(seal.mac) ? Buffer.from(seal.mac, 'hex') : Buffer.alloc(0);
  if (got.length !== want.length || !timingSafeEqual(got, want))
    return {
      ok: false,
      why: 'the stored plan does not carry a valid worker seal (altered, or sealed with another key)',
    };
  let raw: unknown;
  try {
    raw = JSON.parse(seal.body);
  } catch {
    return { ok: false, why: 'the sealed plan is not readable' };
  }
  const b = Body.safeParse(raw);
  if (!b.success) return { ok: false, why: 'the sealed plan has an unexpected shape' };
  const { step } = b.data;
  const targets: StepTarget[] = step.targets.map((t) => ({ ...t, gpus: t.gpus.map((g): TargetGpu => ({ ...g })) }));
  const gpus: TargetGpu[] = step.gpus.map((g) => ({ ...g }));
  return { ok: true, sealed: { ...b.data, step: { ...step, targets, gpus } } };
}
