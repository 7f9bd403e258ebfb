import { randomBytes } from 'node:crypto';
import type { StepEnvelopes } from '../../src/agent-grammar/envelopes.ts';
import { botSigner } from '../../src/auth/signed-jobs.ts';
import type { ProcessIdentity } from '../../src/gpu/process-ref.ts';
import { planDigest, sealStep } from '../../src/plan/plan-seal.ts';
import type { TestKeys } from '../harness/keys.ts';

/**
 * Genuine envelopes for a signal sent straight through the executor (no worker), as the bot
 * (src/auth/signed-jobs.ts) and the worker (workers/unstick) make them, with the fleet's keys its
 * agents trust: the bot's signed unstick request for `container` on `host`, and the worker-signed
 * plan of the step whose targets are exactly `targets`. From the container side that is a tier-1
 * container_signal step (approval `none`); from the host side a tier-2 host_kill step with its card's
 * approval id and an approver's signed decision, since a host's agent signals from the host only for
 * such a step. The agent still checks every target of the line against this plan.
 */
export function signalEnvelopes(o: {
  keys: TestKeys;
  incidentId: string;
  /** The target container's inventory id and Proxmox id, and its host's inventory id. */
  container: string;
  vmid: number;
  host: string;
  side: 'container' | 'host';
  targets: readonly ProcessIdentity[];
  now?: number;
}): { envelopes: StepEnvelopes; approvalId: string } {
  const now = o.now ?? Date.now();
  const requester = 'U0REQUEST1';
  const approver = 'U0APPROVE1';
  const host = o.side === 'host';
  const approvalId = host ? 'apr_SignedSignalTestCard01' : 'none';
  const request = botSigner(o.keys.bot.privateKey).request(
    { incidentId: o.incidentId, target: o.container, host: o.host, vmid: o.vmid, requester, channel: 'C0GPUOPS01' },
    now,
  );
  const seal = sealStep(
    {
      incidentId: o.incidentId,
      approvalId: host ? approvalId : '',
      requester,
      createdAt: now,
      expiresAt: now + 5 * 60_000,
      approvers: host ? [approver] : [],
      adminOnly: false,
      escalation: null,
      container: o.container,
      vmid: o.vmid,
      host: o.host,
      step: {
        id: `${host ? 'host_kill' : 'container_signal'}-${o.incidentId}`,
        tier: host ? 2 : 1,
        kind: host ? 'host_kill' : 'container_signal',
        machineId: host ? o.host : o.container,
        targets: o.targets.map((t) => ({ ...t, gpus: [], hostOnlyWhy: null })),
        gpus: [],
        commands: [],
        explanation: 'test: signal these holders',
        graceMs: 0,
        releaseTimeoutMs: 0,
        pollIntervalMs: 100,
      },
    },
    randomBytes(32),
    o.keys.worker.privateKey,
  );
  const decisions = host
    ? [
        botSigner(o.keys.bot.privateKey).decision(
          {
            approvalId,
            incidentId: o.incidentId,
            planDigest: planDigest(seal),
            decision: 'approved',
            decider: approver,
            channel: 'C0GPUOPS01',
          },
          now,
        ),
      ]
    : [];
  return { envelopes: { request, decisions, plan: { body: seal.body, sig: seal.sig } }, approvalId };
}
