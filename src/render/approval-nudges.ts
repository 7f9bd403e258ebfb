/**
 * Approvals that don't stall, in the thread: the pending card's time left, the reminder and
 * escalation replies (they mention who may decide, through escape.ts `mention`), and the expiry
 * reply that tells the requester what is still held and who can act. Slack messages are static,
 * so the card always says when it expires, and the minutes left only "as of" the last reminder or
 * escalation (the worker logs one of those, and the card is rendered again from the log). Pure.
 */
import type { types } from '@slack/bolt';
import type { Step } from '../plan/unstick-plan.ts';
import type { UnstickLoggedEvent } from '../incident/unstick-events.ts';
import { contextsOf, fallbackText, limitBlocks, sectionsOf } from './blocks.ts';
import { code, mention, rich, text as esc } from './escape.ts';
import type { MessageView } from './status.ts';
import type { Rich } from '../text/rich.ts';

type Ev<T extends UnstickLoggedEvent['type']> = Extract<UnstickLoggedEvent, { type: T }>;
type KnownBlock = types.KnownBlock;

const STEP_WORDS: Record<Step['kind'], string> = {
  container_signal: 'container step',
  host_kill: 'host-level kill',
  host_reset: 'host-level GPU reset',
};

/** `2026-11-30T09:35:00.000Z` → `09:35 UTC`. */
function hhmm(iso: string): string {
  const m = /T(\d\d:\d\d)/.exec(iso);
  return `${m?.[1] ?? '??:??'} UTC`;
}

/** Whole minutes left at `asOf` (rounded down: never promises more time than there is). */
export function minutesLeft(expiresAtMs: number, asOfMs: number): string {
  const ms = expiresAtMs - asOfMs;
  if (ms <= 0) return 'no time left';
  if (ms < 60_000) return 'less than a minute left';
  return `${Math.floor(ms / 60_000)} min left`;
}

/** The words the worker opens an expired incident's verdict advice with (workers/unstick.ts). */
export const EXPIRED_NOTE = 'The approval request expired without a decision; nothing from it was run.';

/** The advice without its opening expiry note: the expiry reply has just said that. */
function withoutNote(advice: Rich): Rich {
  const [first, ...rest] = advice;
  if (typeof first !== 'string' || !first.startsWith(EXPIRED_NOTE)) return advice;
  const left = first.slice(EXPIRED_NOTE.length).trimStart();
  return left === '' ? rest : [left, ...rest];
}

/** How long a card waited, in the unit that says it best. */
function waitedWords(ms: number): string {
  return ms < 60_000 ? `${Math.max(0, Math.round(ms / 1000))} s` : `${Math.floor(ms / 60_000)} min`;
}

const mentions = (ids: readonly string[]): string => ids.map(mention).join(' ');

function nudgesOf(
  req: Ev<'approval_requested'>,
  events: readonly UnstickLoggedEvent[],
): Array<Ev<'approval_reminded'> | Ev<'approval_escalated'>> {
  return events.filter(
    (e): e is Ev<'approval_reminded'> | Ev<'approval_escalated'> =>
      (e.type === 'approval_reminded' || e.type === 'approval_escalated') && e.approvalId === req.approvalId,
  );
}

/**
 * The pending card's time words: `expires at 09:35 UTC`, then ` · as of 09:27 UTC: 7 min left`
 * once reminded or escalated, then the escalation: to come (`escalates to … at …`) or done.
 */
export function cardTimeLeft(
  req: Ev<'approval_requested'>,
  events: readonly UnstickLoggedEvent[],
): { expires: string; escalation: string | null } {
  const nudges = nudgesOf(req, events);
  const last = nudges[nudges.length - 1];
  const asOf = last ? ` · as of ${hhmm(last.at)}: ${minutesLeft(Date.parse(req.expiresAt), Date.parse(last.at))}` : '';
  const escalated = nudges.find((e): e is Ev<'approval_escalated'> => e.type === 'approval_escalated');
  const escalation = escalated
    ? `escalated at ${hhmm(escalated.at)}: ${mentions(escalated.pinged)} may decide too`
    : req.escalation
      ? `escalates to ${mentions(req.escalation.approvers)} at ${hhmm(req.escalation.at)} if nobody has decided by then`
      : null;
  return { expires: `expires at ${hhmm(req.expiresAt)}${asOf}`, escalation };
}

function reply(key: string, lines: string[]): MessageView {
  return { key, placement: 'reply', text: fallbackText(lines), blocks: limitBlocks(sectionsOf(lines)) };
}

function stepWords(req: Ev<'approval_requested'>): string {
  return `${STEP_WORDS[req.step.kind]} on ${code(req.host)}`;
}

/** Half the card's time passed undecided: its deciders are mentioned again, with the time left. */
export function reminderMessage(
  e: Ev<'approval_reminded'>,
  req: Ev<'approval_requested'>,
  requester: string,
): MessageView {
  const left = `${minutesLeft(Date.parse(e.expiresAt), Date.parse(e.at))} as of ${hhmm(e.at)} (expires at ${hhmm(e.expiresAt)})`;
  return reply(`ev:${e.id}`, [
    `:bell: *Reminder* ${mentions(e.pinged)}: the ${stepWords(req)} in the card above still waits for a decision: ${left}.`,
    `Nothing runs until an approver other than ${mention(requester)} approves; when it expires, nothing from it runs.`,
  ]);
}

/** The card waited the escalation delay undecided: the escalation group is mentioned and may decide too. */
export function escalationMessage(
  e: Ev<'approval_escalated'>,
  req: Ev<'approval_requested'>,
  requester: string,
): MessageView {
  const waited = waitedWords(Date.parse(e.at) - Date.parse(req.at));
  const left = `${minutesLeft(Date.parse(e.expiresAt), Date.parse(e.at))} as of ${hhmm(e.at)} (expires at ${hhmm(e.expiresAt)})`;
  return reply(`ev:${e.id}`, [
    `:rotating_light: *Escalated* to ${mentions(e.pinged)}: the ${stepWords(req)} in the card above has waited ${waited} with no decision, so you may now approve or deny it too (${mention(requester)} asked for it and cannot): ${left}.`,
  ]);
}

/**
 * The card expired undecided: the requester is told who was asked, that nothing ran, and what to
 * do next. The next step is the verdict's advice when the worker has logged it (it names what is
 * still held and who can act, from verdict-context.ts); until then, the general one.
 */
export function expiryMessage(
  e: Ev<'approval_expired'>,
  req: Ev<'approval_requested'>,
  events: readonly UnstickLoggedEvent[],
  requester: string,
  target: string,
): MessageView {
  const nudges = nudgesOf(req, events);
  const reminded = [...new Set(nudges.filter((n) => n.type === 'approval_reminded').flatMap((n) => n.pinged))];
  const escalated = [...new Set(nudges.filter((n) => n.type === 'approval_escalated').flatMap((n) => n.pinged))];
  const asked = [
    ...(reminded.length > 0 ? [`reminded ${mentions(reminded)}`] : []),
    ...(escalated.length > 0 ? [`escalated to ${mentions(escalated)}`] : []),
  ];
  const i = events.indexOf(e);
  const verdict = events.slice(i + 1).find((x): x is Ev<'verdict'> => x.type === 'verdict');
  const advice = verdict?.verdict.advice
    ? rich(withoutNote(verdict.verdict.advice))
    : verdict?.verdict.nextStep
      ? esc(
          verdict.verdict.nextStep.startsWith(EXPIRED_NOTE)
            ? verdict.verdict.nextStep.slice(EXPIRED_NOTE.length).trimStart()
            : verdict.verdict.nextStep,
        )
      : `run ${code(`/gpu unstick ${target}`)} again when an approver can answer the card.`;
  const lines = [
    `:hourglass: ${mention(requester)}: the ${stepWords(req)} you asked for expired at ${hhmm(e.at)} with no decision${asked.length > 0 ? ` (${asked.join('; ')})` : ''}; nothing from it was run.`,
    `*What now:* ${advice}`,
  ];
  const blocks: KnownBlock[] = [...sectionsOf(lines)];
  if (!verdict)
    blocks.push(...contextsOf(['The verdict with what is still held follows once the worker has looked again.']));
  return { key: `ev:${e.id}`, placement: 'reply', text: fallbackText(lines), blocks: limitBlocks(blocks) };
}
