import type { KeyObject } from 'node:crypto';
import type { AnyLoggedEvent } from '../incident/all-events.ts';
import { openSeal, planDigest } from '../plan/plan-seal.ts';
import { stepCommands } from '../plan/unstick-plan.ts';

/**
 * What the approver sees is what runs, even if someone rewrote the stream in Redis: before the bot posts or
 * updates a card, every `approval_requested` event is replaced by what the worker's signed plan says
 * (targets, GPUs, commands rebuilt from the templates, expiry, approvers, host, vmid), and its `planHash` by
 * the plan's digest (the card's buttons carry it, the bot's signed decision covers it). A card whose
 * plan is missing, does not verify with the workers' public keys, or is for another approval is
 * not drawn: it says so under the same card, with no buttons (`unverified`). Pure.
 */
const UNVERIFIED_CARD =
  'An approval card was not shown: its plan does not carry a valid worker signature (the incident record was altered, or the worker keys do not match GPU_MEDIC_WORKER_PUBLIC_KEY_FILES). Nothing from it can be approved or will run; run `/gpu unstick` again once this is fixed.';

export function cardsFromSignedPlans(
  events: readonly AnyLoggedEvent[],
  workerPublicKeys: readonly KeyObject[],
  commandTimeoutMs: number,
): AnyLoggedEvent[] {
  return events.map((e): AnyLoggedEvent => {
    if (e.type !== 'approval_requested') return e;
    const seal = e.seal ? { body: e.seal.body, sig: e.seal.sig, mac: '' } : null;
    const opened = openSeal(seal, workerPublicKeys);
    if (!opened.ok || seal === null || opened.sealed.approvalId !== e.approvalId)
      return {
        ...e,
        step: { ...e.step, targets: [], gpus: [], commands: [], explanation: '' },
        unverified: UNVERIFIED_CARD,
      };
    const s = opened.sealed;
    const { escalation: _unsigned, ...rest } = e;
    return {
      ...rest,
      stepId: s.step.id,
      expiresAt: new Date(s.expiresAt).toISOString(),
      planHash: planDigest(seal),
      step: {
        ...s.step,
        commands: stepCommands(s.step.kind, s.step.targets, s.step.gpus, { timeoutMs: commandTimeoutMs }),
      },
      host: s.step.machineId,
      vmid: s.vmid,
      approvers: [...s.approvers],
      ...(s.escalation
        ? { escalation: { approvers: [...s.escalation.approvers], at: new Date(s.escalation.at).toISOString() } }
        : {}),
    };
  });
}
