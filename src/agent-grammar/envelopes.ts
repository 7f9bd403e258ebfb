import type { Envelope } from '../auth/envelope.ts';
import { CodedError, ErrorCode } from '../errors.ts';
import type { CommandSpec } from './command-spec.ts';
import { DESTRUCTIVE_VERBS, NO_APPROVAL } from './arg-types.ts';

/**
 * What a destructive verb carries on stdin (agent/PROTOCOL.md, "Envelopes"): the bot-signed request
 * (tier 1) or decision (tier 2), exactly as the bot signed it, and the worker-signed plan of the
 * step it acts on. The agent verifies both with the public keys installed on the host and checks
 * every target against the plan, so a stolen worker key alone cannot signal or reset. Pure.
 */
export interface StepEnvelopes {
  /** The bot-signed unstick request: it names the container, its host and vmid the agent checks every target against. */
  request: Envelope;
  /** The bot-signed decisions on the card (one per approver, up to the plan's quorum); none for a tier-1 step. */
  decisions: readonly Envelope[];
  /** The worker-signed plan (src/plan/plan-seal.ts body and signature). */
  plan: Envelope;
}

const b64 = (text: string): string => Buffer.from(text, 'utf8').toString('base64');

/** `<kind> <base64 body> <base64 sig>` lines: the request, the decisions, then the plan. */
function envelopeStdin(e: StepEnvelopes): string {
  return [
    `request ${b64(e.request.body)} ${e.request.sig}`,
    ...e.decisions.map((d) => `decision ${b64(d.body)} ${d.sig}`),
    `plan ${b64(e.plan.body)} ${e.plan.sig}`,
    '',
  ].join('\n');
}

function isDestructive(spec: Pick<CommandSpec, 'agent'>): boolean {
  return spec.agent !== undefined && DESTRUCTIVE_VERBS.includes(spec.agent.verb);
}

/**
 * A destructive spec with its envelopes on stdin; refused (nothing is sent) when there are none or
 * they do not fit the verb's approval argument (tier 1 `none` takes a request, tier 2 a decision).
 */
export function withEnvelopes(spec: CommandSpec, envelopes: StepEnvelopes | null): CommandSpec {
  if (!isDestructive(spec)) return spec;
  const verb = spec.agent?.verb ?? '?';
  if (envelopes === null)
    throw new CodedError(
      ErrorCode.BadCommand,
      `The ${verb} command has no signed request or decision and no signed plan to show the host's agent; nothing was run.`,
    );
  const args = spec.agent?.args ?? [];
  const approval = verb === 'signal' ? args[4] : args[args.length - 1];
  const tier1 = approval === NO_APPROVAL;
  if (tier1 !== (envelopes.decisions.length === 0))
    throw new CodedError(
      ErrorCode.BadCommand,
      tier1
        ? `The ${verb} command without an approval carries signed decisions; nothing was run.`
        : `The ${verb} command for approval ${approval ?? '?'} has no signed decision; nothing was run.`,
    );
  return { ...spec, stdin: envelopeStdin(envelopes) };
}
