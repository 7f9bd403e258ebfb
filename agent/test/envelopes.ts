/**
 * Envelopes as the bot and the worker make them (src/auth/envelope.ts, src/plan/plan-seal.ts),
 * signed here with node:crypto Ed25519 keys of the test, and the stdin text the worker sends a
 * destructive verb: `request|decision|plan <base64 body> <base64 sig>` lines.
 */
import type { KeyObject } from 'node:crypto';
import { type Envelope, newNonce, signFields } from '../../src/auth/envelope.ts';
import { planDigest, type Seal, sealStep } from '../../src/plan/plan-seal.ts';
import type { Step, StepTarget } from '../../src/plan/unstick-plan.ts';

export const INCIDENT = 'inc_20261202_010203_agtest';
export const APPROVAL = 'apr_AbCdEfGhIjKlMnOpQrStUv';

const HOST = 'kpro5';
export const REQUESTER = 'U1';
export const APPROVER = 'U2';

export interface PlanOptions {
  incidentId?: string;
  approvalId?: string;
  /** Default: 2 with an approval id, else 1. */
  tier?: 1 | 2;
  kind?: Step['kind'];
  targets?: StepTarget[];
  gpuUuids?: string[];
  container?: string;
  vmid?: number;
  host?: string;
  requester?: string;
  approvers?: string[];
  escalation?: { approvers: string[]; at: number } | null;
  createdAt?: number;
  expiresAt?: number;
  quorum?: number;
}

export function target(hostPid: number, startTimeTicks: number, pidNs: string, containerPid = hostPid): StepTarget {
  return { hostPid, containerPid, startTimeTicks, cmdline: 'sleep 600', pidNs, gpus: [], hostOnlyWhy: null };
}

export function plan(workerKey: KeyObject, o: PlanOptions = {}): Seal {
  const now = Date.now();
  const carded = o.approvalId !== undefined && o.approvalId !== '';
  const step: Step = {
    id: 'step_agent_test',
    tier: o.tier ?? (carded ? 2 : 1),
    kind: o.kind ?? 'container_signal',
    machineId: 'ct129',
    targets: o.targets ?? [],
    gpus: (o.gpuUuids ?? []).map((uuid) => ({ index: 0, hostIndex: 0, uuid, usedMiB: 10 })),
    commands: [],
    explanation: 'agent test',
    graceMs: 1000,
    releaseTimeoutMs: 1000,
    pollIntervalMs: 100,
  };
  return sealStep(
    {
      incidentId: o.incidentId ?? INCIDENT,
      approvalId: o.approvalId ?? '',
      requester: o.requester ?? REQUESTER,
      createdAt: o.createdAt ?? now - 1000,
      expiresAt: o.expiresAt ?? now + 600_000,
      approvers: o.approvers ?? [APPROVER],
      adminOnly: false,
      escalation: o.escalation ?? null,
      container: o.container ?? 'ct129',
      vmid: o.vmid ?? 129,
      host: o.host ?? HOST,
      ...(o.quorum === undefined ? {} : { quorum: o.quorum }),
      step,
    },
    Buffer.alloc(32, 7),
    workerKey,
  );
}

export function request(
  botKey: KeyObject,
  o: {
    incident?: string;
    target?: string;
    host?: string;
    vmid?: string;
    gpu?: string;
    requester?: string;
    signedAt?: number;
    expiresAt?: number;
  } = {},
): Envelope {
  const now = o.signedAt ?? Date.now();
  return signFields(
    'request',
    {
      incident: o.incident ?? INCIDENT,
      target: o.target ?? 'ct129',
      host: o.host ?? HOST,
      vmid: o.vmid ?? '129',
      gpu: o.gpu ?? '',
      requester: o.requester ?? REQUESTER,
      groups: '',
      channel: 'C1',
      signed_at: String(now),
      expires_at: String(o.expiresAt ?? now + 300_000),
      nonce: newNonce(),
    },
    botKey,
  );
}

export function decision(
  botKey: KeyObject,
  seal: Seal,
  o: {
    approval?: string;
    incident?: string;
    decision?: string;
    decider?: string;
    signedAt?: number;
    expiresAt?: number;
    planDigest?: string;
  } = {},
): Envelope {
  const now = o.signedAt ?? Date.now();
  return signFields(
    'decision',
    {
      approval: o.approval ?? APPROVAL,
      incident: o.incident ?? INCIDENT,
      plan: o.planDigest ?? planDigest(seal),
      decision: o.decision ?? 'approved',
      decider: o.decider ?? APPROVER,
      groups: '',
      channel: 'C1',
      signed_at: String(now),
      expires_at: String(o.expiresAt ?? now + 300_000),
      nonce: newNonce(),
    },
    botKey,
  );
}

const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');

/** The stdin of a destructive verb: one line per envelope given. */
export function stdinOf(e: {
  request?: Envelope;
  decision?: Envelope;
  decisions?: Envelope[];
  plan?: Pick<Seal, 'body' | 'sig'>;
}): string {
  const lines: string[] = [];
  if (e.request) lines.push(`request ${b64(e.request.body)} ${e.request.sig}`);
  for (const d of [...(e.decision ? [e.decision] : []), ...(e.decisions ?? [])])
    lines.push(`decision ${b64(d.body)} ${d.sig}`);
  if (e.plan) lines.push(`plan ${b64(e.plan.body)} ${e.plan.sig}`);
  return lines.map((l) => `${l}\n`).join('');
}
