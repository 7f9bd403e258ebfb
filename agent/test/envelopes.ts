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

export interface PlanOptions {
  incidentId?: string;
  approvalId?: string;
  kind?: Step['kind'];
  targets?: StepTarget[];
  gpuUuids?: string[];
  container?: string;
  vmid?: number;
}

export function target(hostPid: number, startTimeTicks: number, pidNs: string, containerPid = hostPid): StepTarget {
  return { hostPid, containerPid, startTimeTicks, cmdline: 'sleep 600', pidNs, gpus: [], hostOnlyWhy: null };
}

export function plan(workerKey: KeyObject, o: PlanOptions = {}): Seal {
  const now = Date.now();
  const step: Step = {
    id: 'step_agent_test',
    tier: o.approvalId === undefined || o.approvalId === '' ? 1 : 2,
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
      requester: 'U1',
      createdAt: now,
      expiresAt: now + 600_000,
      approvers: ['U2'],
      adminOnly: false,
      escalation: null,
      container: o.container ?? 'ct129',
      vmid: o.vmid ?? 129,
      step,
    },
    Buffer.alloc(32, 7),
    workerKey,
  );
}

export function request(
  botKey: KeyObject,
  o: { incident?: string; target?: string; expiresAt?: number } = {},
): Envelope {
  const now = Date.now();
  return signFields(
    'request',
    {
      incident: o.incident ?? INCIDENT,
      target: o.target ?? 'ct129',
      requester: 'U1',
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
  o: { approval?: string; incident?: string; decision?: string; expiresAt?: number; planDigest?: string } = {},
): Envelope {
  const now = Date.now();
  return signFields(
    'decision',
    {
      approval: o.approval ?? APPROVAL,
      incident: o.incident ?? INCIDENT,
      plan: o.planDigest ?? planDigest(seal),
      decision: o.decision ?? 'approved',
      decider: 'U2',
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
export function stdinOf(e: { request?: Envelope; decision?: Envelope; plan?: Pick<Seal, 'body' | 'sig'> }): string {
  const lines: string[] = [];
  if (e.request) lines.push(`request ${b64(e.request.body)} ${e.request.sig}`);
  if (e.decision) lines.push(`decision ${b64(e.decision.body)} ${e.decision.sig}`);
  if (e.plan) lines.push(`plan ${b64(e.plan.body)} ${e.plan.sig}`);
  return lines.map((l) => `${l}\n`).join('');
}
