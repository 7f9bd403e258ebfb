import { randomBytes } from 'node:crypto';
import type { StepEnvelopes } from '../../src/agent-grammar/envelopes.ts';
import { botSigner } from '../../src/auth/signed-jobs.ts';
import type { ProcessIdentity } from '../../src/gpu/process-ref.ts';
import { sealStep } from '../../src/plan/plan-seal.ts';
import type { TestKeys } from '../harness/keys.ts';

/**
 * Genuine tier-1 envelopes for a signal sent straight through the executor (no worker): the bot's
 * signed unstick request for `container`, and the worker-signed plan of a container_signal step
 * whose targets are exactly `targets`, as the bot (src/auth/signed-jobs.ts) and the worker
 * (workers/unstick tier1Plan) make them, with the fleet's keys its agents trust. The agent still
 * checks every target of the line against this plan, so a PID the plan does not name is refused.
 */
export function tier1SignalEnvelopes(o: {
  keys: TestKeys;
  incidentId: string;
  /** The target container's inventory id and Proxmox id. */
  container: string;
  vmid: number;
  /** Where the step's commands run (the container, or its host). */
  machineId: string;
  targets: readonly ProcessIdentity[];
  now?: number;
}): StepEnvelopes {
  const now = o.now ?? Date.now();
  const requester = 'U0REQUEST1';
  const request = botSigner(o.keys.bot.privateKey).request(
    { incidentId: o.incidentId, target: o.container, requester, channel: 'C0GPUOPS01' },
    now,
  );
  const seal = sealStep(
    {
      incidentId: o.incidentId,
      approvalId: '',
      requester,
      createdAt: now,
      expiresAt: now + 5 * 60_000,
      approvers: [],
      adminOnly: false,
      escalation: null,
      container: o.container,
      vmid: o.vmid,
      step: {
        id: `container_signal-${o.incidentId}`,
        tier: 1,
        kind: 'container_signal',
        machineId: o.machineId,
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
  return { authority: { kind: 'request', envelope: request }, plan: { body: seal.body, sig: seal.sig } };
}
