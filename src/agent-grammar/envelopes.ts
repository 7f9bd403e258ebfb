import type { Envelope } from '../auth/envelope.ts';
import { CodedError, ErrorCode } from '../errors.ts';
import type { CommandSpec } from './command-spec.ts';
import { DESTRUCTIVE_VERBS, NO_APPROVAL } from './arg-types.ts';

/**
 * What a destructive verb carries on stdin (AGENT-PROTOCOL.md, "Envelopes"): the bot-signed request
 * (tier 1) or decision (tier 2), exactly as the bot signed it, and the worker-signed plan of the
 * step it acts on. The agent verifies both with the public keys installed on the host and checks
 * every target against the plan, so a stolen worker key alone cannot signal or reset. Pure.
 */
export interface StepEnvelopes {
  /** Tier 1: the unstick request; tier 2: the decision on the card. */
  authority: { kind: 'request' | 'decision'; envelope: Envelope };
  /** The worker-signed plan (src/plan/plan-seal.ts body and signature). */
  plan: Envelope;
}

const b64 = (text: string): string => Buffer.from(text, 'utf8').toString('base64');

/** `<kind> <base64 body> <base64 sig>` lines, authority first, then the plan. */
function envelopeStdin(e: StepEnvelopes): string {
  return [
    `${e.authority.kind} ${b64(e.authority.envelope.body)} ${e.authority.envelope.sig}`,
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
  const want = approval === NO_APPROVAL ? 'request' : 'decision';
  if (envelopes.authority.kind !== want)
    throw new CodedError(
      ErrorCode.BadCommand,
      `The ${verb} command for approval ${approval ?? '?'} needs the signed ${want}, not the ${envelopes.authority.kind}; nothing was run.`,
    );
  return { ...spec, stdin: envelopeStdin(envelopes) };
}
