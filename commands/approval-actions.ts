import type { App, BlockAction, ButtonAction } from '@slack/bolt';
import { ApprovalStore, type StoreRefusalCode } from '../src/approval/approval-store.ts';
import { findMachine } from '../src/config/machines.ts';
import type { Approval } from '../src/approval/approval-store.ts';
import { APPROVE_ACTION_ID, DENY_ACTION_ID } from '../src/render/unstick.ts';
import { decisionJobId } from '../src/queue/jobs.ts';
import { nameField, type CommandDeps } from './deps.ts';
import { mention } from '../src/render/escape.ts';
import { planDigest } from '../src/plan/plan-seal.ts';

export interface Click {
  approvalId: string;
  /** The plan digest the card's button carried (src/render/unstick.ts approvalButtonValue); null: none. */
  planDigest?: string | null;
  decision: 'approved' | 'denied';
  user: string;
  /** The clicker's Slack user name (`user.username`, else `user.name`), recorded with what they did. */
  userName?: string | undefined;
  channel: string | null;
  messageTs: string | null;
}

function hhmm(ms: number): string {
  return `${new Date(ms).toISOString().slice(11, 16)} UTC`;
}

/** What the clicker reads when a click is refused: what happened, that nothing ran, what to do. */
export function refusalText(code: StoreRefusalCode | 'wrong_card', a: Approval | null, user?: string): string {
  switch (code) {
    case 'self_approval':
      return ":no_entry: You asked for this unstick, so you can't approve its host-level step: a second person must. Nothing was run.";
    case 'not_approver':
      if (user !== undefined && a?.approvers.includes(user))
        return ':no_entry: You are no longer on the approvers list for host-level steps (GPU_MEDIC_APPROVERS now), though you were when this card was posted. Nothing was run. Ask a current approver to look at the card.';
      return ':no_entry: You are not on the approvers list for host-level steps (by Slack user ID). Nothing was run. Ask an approver to look at the card.';
    case 'escalation_not_due':
      return `:hourglass_flowing_right: You are in the escalation group for this card: you may decide it from ${a?.escalation ? hhmm(a.escalation.at) : 'the escalation time'} on, if nobody has by then. Nothing was run.`;
    case 'approval_expired':
      return `:hourglass: This approval expired${a ? ` at ${hhmm(a.expiresAt)}` : ''}. Nothing was run. Start again with \`/gpu unstick\` if the GPUs are still stuck.`;
    case 'approval_decided':
      return `:information_source: Already ${a?.state ?? 'decided'}${a?.decidedBy ? ` by ${mention(a.decidedBy)}` : ''}${a?.decidedAt ? ` at ${hhmm(a.decidedAt)}` : ''}. Nothing more was done.`;
    case 'budget_exhausted':
      return ":no_entry: The host's blast-radius budget of host-level steps is spent for this hour: only an admin can approve more. Nothing was run.";
    case 'approval_not_found':
      return ':question: This approval does not exist (any more). Nothing was run.';
    case 'wrong_card':
      return ":no_entry: This button does not belong to that approval's card. Nothing was run.";
  }
}

/**
 * One click on Approve or Deny. Every outcome is recorded in the incident log; only an accepted
 * decision enqueues work, under a fixed job id so a double click or a Slack retry runs nothing twice.
 */
export async function handleApprovalClick(click: Click, deps: CommandDeps): Promise<string> {
  if (!ApprovalStore.isId(click.approvalId)) return refusalText('approval_not_found', null);
  const approval = await deps.approvals.get(click.approvalId);
  if (!approval) return refusalText('approval_not_found', null);
  const meta = await deps.log.meta(approval.incidentId);
  const at = deps.now().toISOString();
  const refuse = async (code: StoreRefusalCode | 'wrong_card', a: Approval | null): Promise<string> => {
    await deps.log.append(approval.incidentId, {
      type: 'approval_refused',
      at,
      approvalId: approval.id,
      by: click.user,
      ...nameField(click.userName),
      reason: code === 'wrong_card' ? 'approval_not_found' : code,
    });
    deps.logger.warn(
      { incident: approval.incidentId, approval: approval.id, user: click.user, code, event: 'approval_refused' },
      'approval click refused',
    );
    return refusalText(code, a, click.user);
  };
  // The id is unguessable, but a tampered payload could still carry one from another thread.
  const refs = await deps.log.slackRefs(approval.incidentId);
  const card = refs.get(`approval:${approval.id}`);
  if (!meta || click.channel !== meta.channel || !card || click.messageTs !== card.ts)
    return refuse('wrong_card', approval);
  // The card showed another plan than the one on record (a rewritten card): nothing is decided.
  const digest = click.planDigest ?? null;
  if (digest !== null && (approval.seal === null || planDigest(approval.seal) !== digest))
    return refuse('wrong_card', approval);
  // Checked against the live configuration as well as the card's frozen list, in the same atomic step.
  const r = await deps.approvals.decide(approval.id, {
    user: click.user,
    decision: click.decision,
    now: deps.now().getTime(),
    liveApprovers: [...deps.policy.approvers, ...(deps.policy.admins ?? [])],
    liveEscalation: deps.policy.escalationApprovers ?? [],
    channel: click.channel ?? '',
    ...(digest !== null ? { planDigest: digest } : {}),
  });
  const site = findMachine(deps.inventory, meta.targets[0] ?? '')?.site ?? 'default';
  const enqueue = () =>
    deps.dispatcher.enqueue(
      site,
      { kind: 'decision', incidentId: approval.incidentId, approvalId: approval.id },
      decisionJobId(approval.incidentId, approval.id),
    );
  if (!r.ok) {
    const a = r.approval;
    // A retry of this user's own accepted click whose signature was never stored (the bot stopped
    // between the two steps): signed now, from the record's own decision and time.
    if (
      r.code === 'approval_decided' &&
      a?.decidedBy === click.user &&
      a.decidedAt !== null &&
      a.signedDecision === null
    )
      if (a.state === 'approved' || a.state === 'denied')
        await deps.approvals.sign(a.id, {
          user: click.user,
          decision: a.state,
          now: a.decidedAt,
          channel: click.channel ?? '',
          ...(digest !== null ? { planDigest: digest } : {}),
        });
    // A retry of a click whose job was never queued: queue it now (same job id: never twice).
    if (r.code === 'approval_decided' && (await deps.approvals.isUndispatched(approval.id)))
      await enqueue().catch(() => undefined);
    return refuse(r.code, r.approval);
  }
  await deps.log.append(approval.incidentId, {
    type: 'approval_decided',
    at,
    approvalId: approval.id,
    stepId: approval.stepId,
    decision: click.decision,
    by: click.user,
    ...nameField(click.userName),
  });
  try {
    await enqueue();
  } catch (err) {
    // The decision is stored (and indexed as not yet taken up): a worker's sweep queues its job.
    deps.logger.warn(
      { err, incident: approval.incidentId, approval: approval.id },
      "decision stored, its job not queued: left to the workers' sweep",
    );
    return click.decision === 'approved'
      ? ':white_check_mark: Approved and recorded. Handing it to a worker failed just now; a worker picks it up on its own within seconds (nothing runs twice). Results follow in the thread.'
      : ':x: Denied and recorded. Nothing will run on the host; a worker closes the incident within seconds.';
  }
  return click.decision === 'approved'
    ? ':white_check_mark: Approved. The worker re-checks every process (PID and start time) before it signals anything; results follow in the thread.'
    : ':x: Denied. Nothing will run on the host; the thread will show the final state.';
}

export function registerApprovalActions(app: App, deps: CommandDeps): void {
  for (const [actionId, decision] of [
    [APPROVE_ACTION_ID, 'approved'],
    [DENY_ACTION_ID, 'denied'],
  ] as const) {
    app.action<BlockAction<ButtonAction>>(
      { type: 'block_actions', action_id: actionId },
      async ({ ack, body, action, respond }) => {
        await ack();
        let text: string;
        try {
          const [approvalId = '', digest] = String(action.value ?? '').split('.');
          text = await handleApprovalClick(
            {
              approvalId,
              planDigest: digest ?? null,
              decision,
              user: body.user.id,
              userName: body.user.username ?? body.user.name,
              channel: body.channel?.id ?? body.container?.channel_id ?? null,
              messageTs: body.message?.ts ?? body.container?.message_ts ?? null,
            },
            deps,
          );
        } catch (err) {
          deps.logger.error({ err }, 'approval click failed');
          text =
            ':warning: gpu-medic could not record this click (queue unavailable?). Nothing was run. Try again in a minute.';
        }
        await respond({ response_type: 'ephemeral', replace_original: false, text });
      },
    );
  }
}
