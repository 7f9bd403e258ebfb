import type { AnyLoggedEvent } from '../incident/all-events.ts';
import type { types } from '@slack/bolt';
import type { DecideRefusalCode } from '../approval/approval-policy.ts';
import type { Diagnosis } from '../gpu/diagnose.ts';
import { isGreen, type Verdict } from '../gpu/verdict.ts';
import { SIGNAL_SCRIPT } from '../agent-grammar/templates/signal.ts';
import { READ_PROCS_SCRIPT } from '../agent-grammar/templates/unstick-commands.ts';
import type { Step } from '../plan/unstick-plan.ts';
import { shellQuote } from '../text/shell-quote.ts';
import { buildTableBlock, monospaceTable } from './table-block.ts';
import type { IncidentMeta } from '../incident/events.ts';
import { snapshotViews, type MessageView } from './status.ts';
import { neverSignalled, OUTCOME_WORDS, signalOutcome } from '../incident/signal-outcome.ts';
import { clipChars, code, codeLine, mention, rich, text as esc } from './escape.ts';
export { splitForCards } from '../text/batches.ts';
import { BLOCKS_PER_MESSAGE, FALLBACK_TEXT_MAX, contextsOf, fallbackText, limitBlocks, sectionsOf } from './blocks.ts';
import type { UnstickLoggedEvent } from '../incident/unstick-events.ts';
import { cardTimeLeft, escalationMessage, expiryMessage, reminderMessage } from './approval-nudges.ts';
import { count, mib, seconds } from '../text/units.ts';
import {
  inlineOf,
  richLinesBlock,
  richListBlocks,
  richPreformattedBlocks,
  rtCode,
  rtEmoji,
  rtText,
  sentenceParts,
  type Inline,
} from './rich-text.ts';

type KnownBlock = types.KnownBlock;
type Ev<T extends UnstickLoggedEvent['type']> = Extract<UnstickLoggedEvent, { type: T }>;

/** Button ids the bot's action handlers listen to; the value is only the approval id. */
export const APPROVE_ACTION_ID = 'gpu_approve';
export const DENY_ACTION_ID = 'gpu_deny';

const SECTION_MAX = 3000;
const stamp = (iso: string): string => `${iso.slice(0, 19).replace('T', ' ')} UTC`;

const READ_SCRIPT_WORD = shellQuote(READ_PROCS_SCRIPT);
const SIGNAL_SCRIPT_WORD = shellQuote(SIGNAL_SCRIPT);

/** The fixed scripts are long; the thread names them, the incident log keeps them verbatim. */
function shortCommand(command: string): string {
  return command
    .split(READ_SCRIPT_WORD)
    .join('<read-procs script: stat, NSpid, ns/pid, cmdline>')
    .split(SIGNAL_SCRIPT_WORD)
    .join(
      '<check-and-signal script: pidfd, then PID + start time, PID namespace, open /dev/nvidia*; args: side signal ns (pid start ctpid)…>',
    );
}

function clip(text: string, max = SECTION_MAX): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

function section(text: string): KnownBlock {
  return { type: 'section', text: { type: 'mrkdwn', text: clip(text) } };
}

function context(text: string): KnownBlock {
  return { type: 'context', elements: [{ type: 'mrkdwn', text: clip(text) }] };
}

const KIND_TITLE: Record<Step['kind'], string> = {
  container_signal: 'Stop the holders from inside the container',
  host_kill: 'Host-level kill',
  host_reset: 'Host-level GPU reset',
};

/** Every refusal code the log can hold has words (the compiler checks the list is complete). */
const REFUSAL_TEXT: Record<DecideRefusalCode | 'approval_not_found', string> = {
  self_approval: 'the requester cannot approve their own request',
  not_approver: 'not a configured approver',
  escalation_not_due: 'in the escalation group, clicked before the escalation time',
  approval_expired: 'the request had expired',
  approval_decided: 'already decided',
  approval_not_found: 'no such approval',
  budget_exhausted:
    "the host's blast-radius budget of host-level steps was spent for this hour; only an admin can approve more",
};

/** `saidWhy`: root causes an earlier message of the thread said (a before table's Why lines), not said again. */
function diagnosisMessage(e: Ev<'diagnosis'>, saidWhy: ReadonlySet<string>): MessageView {
  const d: Diagnosis = e.diagnosis;
  const idle = d.gpus.filter((g) => g.kind === 'idle').map((g) => g.index ?? '?');
  // gpu-medic's sentence as data: its cmdlines become code spans; one logged before `parts` existed is escaped whole.
  const lines = d.gpus.filter((g) => g.kind !== 'idle').map((g) => `• ${g.parts ? rich(g.parts) : esc(g.sentence)}`);
  if (idle.length > 0) lines.push(`• ${idle.length === 1 ? 'GPU' : 'GPUs'} ${idle.join(', ')}: idle.`);
  if (d.error) lines.push(`• nvidia-smi failed: ${esc(d.error.message)}`);
  // Root causes (src/gpu/root-cause.ts): composed sentences, flag names as code.
  for (const c of d.causes ?? []) if (!saidWhy.has(c.sentence)) lines.push(`• Why: ${rich(c.parts)}`);
  for (const m of d.deviceOnly)
    lines.push(
      `• PID ${m.containerPid} ${code(m.command ?? '?')} has ${m.devices.map(code).join(', ')} open but holds no GPU memory (a monitor?): left alone.`,
    );
  const heading = `*Diagnosis (${e.label})* of ${code(d.target)} on ${code(d.host)}`;
  return {
    key: `ev:${e.id}`,
    placement: 'reply',
    text: fallbackText([heading, ...lines]),
    blocks: limitBlocks(sectionsOf([heading, ...lines])),
  };
}

/**
 * Signals the log says were about to go out (`signal_intent`) with no `signalled` answer after them:
 * the worker stopped, or the command's answer was lost, after the signal may have been sent.
 */
function unanswered(
  events: readonly UnstickLoggedEvent[],
): Array<{ stepId: string; signal: 'TERM' | 'KILL'; hostPid: number; containerPid: number; cmdline: string }> {
  const out: Array<{
    stepId: string;
    signal: 'TERM' | 'KILL';
    hostPid: number;
    containerPid: number;
    cmdline: string;
  }> = [];
  events.forEach((e, i) => {
    if (e.type !== 'signal_intent') return;
    const later = events.slice(i + 1);
    for (const t of e.targets) {
      const answered = later.some(
        (x) => x.type === 'signalled' && x.stepId === e.stepId && x.signal === e.signal && x.hostPid === t.hostPid,
      );
      if (!answered)
        out.push({
          stepId: e.stepId,
          signal: e.signal,
          hostPid: t.hostPid,
          containerPid: t.containerPid,
          cmdline: t.cmdline,
        });
    }
  });
  return out;
}

function stepMessage(start: Ev<'step_started'>, events: readonly UnstickLoggedEvent[]): MessageView {
  const mine = events.filter((e) => 'stepId' in e && e.stepId === start.stepId);
  const finished = mine.find((e): e is Ev<'step_finished'> => e.type === 'step_finished');
  const state = finished
    ? `${finished.outcome === 'done' ? ':white_check_mark:' : finished.outcome === 'skipped' ? ':fast_forward:' : ':warning:'} ${finished.outcome} in ${seconds(finished.durationMs)}`
    : ':gear: running…';
  const heading = `*${KIND_TITLE[start.kind]}* (tier ${start.tier}, on ${code(start.machineId)}) · ${state}`;
  const commands = mine
    .filter((e): e is Ev<'command'> => e.type === 'command')
    .map((c) => {
      const r = c.record;
      const end = r.timedOut ? 'timed out' : r.code !== null ? `exit ${r.code}` : `signal ${r.signal ?? '?'}`;
      return [codeLine(shortCommand(r.command)), `    → ${end} · ${seconds(r.durationMs)}`];
    });
  const signalled = mine
    .filter((e): e is Ev<'signalled'> => e.type === 'signalled')
    .map(
      (s) =>
        `• SIG${s.signal} PID ${s.containerPid} (host PID ${s.hostPid}) ${code(clipChars(s.cmdline, 80))}: ${s.result === 'sent' ? 'sent' : OUTCOME_WORDS[signalOutcome(s)]}${s.reason ? ` (${esc(s.reason)})` : ''}`,
    );
  for (const u of unanswered(mine))
    signalled.push(
      finished
        ? `• SIG${u.signal} PID ${u.containerPid} (host PID ${u.hostPid}) ${code(clipChars(u.cmdline, 80))}: may have been sent; no answer was recorded (the worker stopped or lost the connection while sending it)`
        : `• SIG${u.signal} PID ${u.containerPid} (host PID ${u.hostPid}) ${code(clipChars(u.cmdline, 80))}: sending…`,
    );
  const blocks: KnownBlock[] = [
    section(heading),
    ...contextsOf([rich(sentenceParts(start.explanation))]),
    ...sectionsOf(commands.flat(), { code: true }),
    ...sectionsOf(signalled),
  ];
  if (finished?.message) blocks.push(...contextsOf([esc(finished.message)]));
  const text = fallbackText([
    heading,
    ...(commands.length > 0 ? ['```', ...commands.flat(), '```'] : []),
    ...signalled,
    ...(finished?.message ? [esc(finished.message)] : []),
  ]);
  return { key: `step:${start.stepId}`, placement: 'reply', text, blocks: limitBlocks(blocks) };
}

/** The card's targets as the fallback text's lines (mrkdwn, escaped). */
function cardTargets(step: Step): string[] {
  const lines = step.targets.map((t) => {
    const gpus = t.gpus.map((g) => `GPU ${g.index ?? '?'} ${mib(g.usedMiB)}`).join(', ');
    const why = t.hostOnlyWhy ? `\n    _why the host: ${esc(t.hostOnlyWhy)}_` : '';
    return `• host PID *${t.hostPid}* · container PID *${t.containerPid}* · start ${t.startTimeTicks} ticks after boot · ${code(clipChars(t.cmdline, 120))} · ${gpus}${why}`;
  });
  for (const g of step.gpus)
    lines.push(
      `• GPU ${g.index ?? '?'} (host GPU ${g.hostIndex ?? '?'}${g.uuid ? `, ${code(g.uuid)}` : ''}) · ${mib(g.usedMiB)} held, no process`,
    );
  return lines;
}

/** The same targets as rich_text list items: the cmdline, the UUID and the reason are data elements. */
function cardTargetsRich(step: Step): Inline[][] {
  const bold = { bold: true } as const;
  const items = step.targets.map((t): Inline[] => [
    rtText('host PID '),
    rtText(String(t.hostPid), bold),
    rtText(' · container PID '),
    rtText(String(t.containerPid), bold),
    rtText(` · start ${t.startTimeTicks} ticks after boot · `),
    rtCode(clipChars(t.cmdline, 120)),
    rtText(` · ${t.gpus.map((g) => `GPU ${g.index ?? '?'} ${mib(g.usedMiB)}`).join(', ')}`),
    ...(t.hostOnlyWhy ? [rtText('\n'), rtText(`why the host: ${t.hostOnlyWhy}`, { italic: true })] : []),
  ]);
  for (const g of step.gpus)
    items.push([
      rtText(`GPU ${g.index ?? '?'} (host GPU ${g.hostIndex ?? '?'}`),
      ...(g.uuid ? [rtText(', '), rtCode(g.uuid)] : []),
      rtText(`) · ${mib(g.usedMiB)} held, no process`),
    ]);
  return items;
}

const WHEN_NOTE: Record<Step['commands'][number]['when'], string> = {
  always: '',
  survivors: '   # only PIDs still alive and unchanged',
  still_matching: '   # only if the re-check still matches',
  persistence_was_on: '   # only if persistence mode was on',
};

/**
 * A card in two renderings of the same facts: `fallback`, the message text (mrkdwn, every piece of
 * machine text escaped), and the blocks' rich_text, where machine text is data by construction
 * (so the card needs no look-alike characters to keep machine text inert): code-styled elements and the
 * literal commands in a preformatted element.
 */
interface CardParts {
  fallback: { heading: string; explanation: string; targets: string[]; commandsHeading: string; commands: string[] };
  heading: Inline[];
  explanation: Inline[];
  targets: Inline[][];
  commandsHeading: Inline[];
  commands: string[];
}

function cardParts(step: Step, host: string, vmid: number): CardParts {
  const onHost = step.kind !== 'container_signal';
  const commands = step.commands.map((c) => `[${c.on}] ${shortCommand(c.display)}${WHEN_NOTE[c.when]}`);
  return {
    fallback: {
      heading: `:lock: *${KIND_TITLE[step.kind]} needs a second person* · host ${code(host)} · container vmid ${vmid}`,
      explanation: rich(sentenceParts(step.explanation)),
      targets: cardTargets(step),
      commandsHeading: `Commands that will run${onHost ? ` on ${code(host)}` : ''}:`,
      commands: commands.map(codeLine),
    },
    heading: [
      ...rtEmoji('lock'),
      rtText(`${KIND_TITLE[step.kind]} needs a second person`, { bold: true }),
      rtText(' · host '),
      rtCode(host),
      rtText(` · container vmid ${vmid}`),
    ],
    explanation: inlineOf(sentenceParts(step.explanation)),
    targets: cardTargetsRich(step),
    commandsHeading: [
      rtText(`Commands that will run${onHost ? ' on ' : ':'}`),
      ...(onHost ? [rtCode(host), rtText(':')] : []),
    ],
    commands,
  };
}

/** The card's body: every target and every command, over as many blocks as they need. */
function cardBody(p: CardParts): KnownBlock[] {
  return [
    richLinesBlock([p.heading, p.explanation]),
    ...(p.targets.length > 0
      ? richListBlocks(p.targets)
      : [richLinesBlock([[rtText('no targets', { italic: true })]])]),
    ...richPreformattedBlocks(p.commands, p.commandsHeading),
  ];
}

/** Blocks a pending card adds after its body: the status context and the buttons (refusals ride in one more). */
const CARD_TAIL_BLOCKS = 3;

/**
 * True when one Slack message can show every target and command of `step` with its buttons. Pure;
 * the same layout the card uses, so a step that fits here is shown whole on its card.
 */
export function approvalCardFits(step: Step, host: string, vmid: number): boolean {
  return cardBody(cardParts(step, host, vmid)).length + CARD_TAIL_BLOCKS <= BLOCKS_PER_MESSAGE;
}

/**
 * What an Approve/Deny button carries: the approval id and the digest of the plan the card was
 * drawn from (the bot signs its decision over that digest, so the worker runs only the plan
 * with it).
 */
function approvalButtonValue(req: Pick<Ev<'approval_requested'>, 'approvalId' | 'planHash'>): string {
  return `${req.approvalId}.${req.planHash}`;
}

function approvalCard(
  req: Ev<'approval_requested'>,
  events: readonly UnstickLoggedEvent[],
  requester: string,
): MessageView {
  // The bot could not verify the worker's signature of this card's plan; nothing of it is drawn, so no one
  // approves a forgery.
  if (req.unverified) {
    const text = `:no_entry: ${req.unverified}`;
    return { key: `approval:${req.approvalId}`, placement: 'reply', text, blocks: [section(esc(req.unverified))] };
  }
  const decided = events.find(
    (e): e is Ev<'approval_decided'> => e.type === 'approval_decided' && e.approvalId === req.approvalId,
  );
  const expired = events.find(
    (e): e is Ev<'approval_expired'> => e.type === 'approval_expired' && e.approvalId === req.approvalId,
  );
  const refusals = events.filter(
    (e): e is Ev<'approval_refused'> => e.type === 'approval_refused' && e.approvalId === req.approvalId,
  );
  const step = req.step;
  const parts = cardParts(step, req.host, req.vmid);
  const fits = approvalCardFits(step, req.host, req.vmid);
  let blocks: KnownBlock[];
  if (fits) blocks = cardBody(parts);
  else {
    // Never a button under a list the approver cannot see whole: this card cannot be approved.
    const what = `${step.targets.length} ${step.targets.length === 1 ? 'process' : 'processes'}${step.gpus.length > 0 ? ` and ${step.gpus.length} GPUs` : ''}`;
    blocks = [
      richLinesBlock([
        parts.heading,
        parts.explanation,
        [
          ...rtEmoji('no_entry'),
          rtText(
            `This step covers ${what} and ${step.commands.length} commands: more than one Slack message can show, so it cannot be approved from here (an approver must see every target a button runs). Nothing from this card will run; it expires on its own. Stop fewer processes at a time, or run the step by hand on `,
          ),
          rtCode(req.host),
          rtText(' after checking each PID.'),
        ],
      ]),
    ];
  }
  let status: string;
  // A decision is final; an expiry only counts if nobody decided first.
  if (decided) {
    status =
      decided.decision === 'approved'
        ? `:white_check_mark: *Approved* by ${mention(decided.by)} at ${stamp(decided.at)}`
        : `:no_entry: *Denied* by ${mention(decided.by)} at ${stamp(decided.at)}. Nothing from this card will run.`;
    blocks.push(section(status));
  } else if (expired) {
    status = `:hourglass: *Expired* at ${stamp(expired.at)} without a decision. Nothing from this card was run. ${mention(requester)}: what to do next is in the thread below.`;
    blocks.push(section(status));
  } else if (!fits) {
    status = `Requested by ${mention(requester)} · ${cardTimeLeft(req, events).expires} · too large to approve from Slack`;
    blocks.push(context(status));
  } else {
    const time = cardTimeLeft(req, events);
    status = `Requested by ${mention(requester)} · ${time.expires} · a configured approver other than the requester may decide${time.escalation ? ` · ${time.escalation}` : ''}`;
    blocks.push(context(status));
    blocks.push({
      type: 'actions',
      block_id: 'gpu_approval',
      elements: [
        {
          type: 'button',
          action_id: APPROVE_ACTION_ID,
          text: { type: 'plain_text', text: 'Approve' },
          style: 'primary',
          value: approvalButtonValue(req),
          confirm: {
            title: { type: 'plain_text', text: 'Run on the host?' },
            text: { type: 'mrkdwn', text: clip(`The commands above will run on ${code(req.host)} as root.`, 300) },
            confirm: { type: 'plain_text', text: 'Approve' },
            deny: { type: 'plain_text', text: 'Cancel' },
          },
        },
        {
          type: 'button',
          action_id: DENY_ACTION_ID,
          text: { type: 'plain_text', text: 'Deny' },
          style: 'danger',
          value: approvalButtonValue(req),
        },
      ],
    });
  }
  const refused = refusals.map(
    (r) => `Refused: ${mention(r.by)}, ${REFUSAL_TEXT[r.reason] ?? esc(r.reason)} (${stamp(r.at)})`,
  );
  if (refused.length > 0) {
    // Room is kept for one refusal block; a long run of refused clicks is counted, not listed past it.
    const room = BLOCKS_PER_MESSAGE - blocks.length;
    const all = contextsOf(refused);
    blocks.push(
      ...(all.length <= room
        ? all
        : contextsOf([`${refused.length} refused clicks; the latest: ${refused[refused.length - 1] ?? ''}`])),
    );
  }
  const text = fallbackText(
    [
      parts.fallback.heading,
      parts.fallback.explanation,
      ...parts.fallback.targets,
      parts.fallback.commandsHeading,
      '```',
      ...parts.fallback.commands,
      '```',
      status,
    ],
    FALLBACK_TEXT_MAX,
    'in the card above',
  );
  return { key: `approval:${req.approvalId}`, placement: 'reply', text, blocks };
}

const NOW_TEXT: Record<'read' | 'in_error' | 'missing', string | null> = {
  read: null,
  in_error: 'gpu error',
  missing: 'missing after',
};

/**
 * The before → after table: its own message, since Slack allows one table block per message.
 * Speaks of the target's memory (held, left, freed); what others changed is said apart.
 */
function verdictMessage(e: Ev<'verdict'>, target: string): MessageView {
  const v: Verdict = e.verdict;
  const icon = isGreen(v)
    ? ':white_check_mark:'
    : v.kind === 'partially_recovered'
      ? ':large_yellow_circle:'
      : ':red_circle:';
  const heading = `${icon} *${v.title}* · ${count(v.totalFreedMiB)} MiB freed`;
  const header = ['GPU', `Held by ${target}`, 'Left', 'Freed', 'GPU in use before → after', 'Now'];
  const num = (n: number | null | undefined): string => (n === null || n === undefined ? '?' : count(n));
  const rows = v.gpus.map((g) => [
    String(g.index ?? '?'),
    mib(g.heldMiB ?? null),
    mib(g.leftMiB ?? null),
    mib(g.freedMiB),
    `${num(g.beforeMiB)} → ${num(g.afterMiB)} MiB`,
    NOW_TEXT[g.afterState ?? 'read'] ?? (g.after ?? 'not read').replace(/_/g, ' '),
  ]);
  const outside = v.outside ?? [];
  const blocks: KnownBlock[] = [section(heading), buildTableBlock(header, rows).block];
  if (outside.length > 0) blocks.push(context(`Outside this incident: ${esc(outside.join(' '))}`));
  // gpu-medic's advice as data (mentions and commands once); a verdict logged before `advice` existed is escaped whole.
  const advice = v.advice ? rich(v.advice) : v.nextStep ? esc(v.nextStep) : null;
  if (advice !== null) blocks.push(...sectionsOf([`*Next step:* ${advice}`]));
  const text = fallbackText([
    heading,
    monospaceTable(header, rows),
    ...(outside.length > 0 ? [`Outside this incident: ${esc(outside.join(' '))}`] : []),
    ...(advice !== null ? [`Next step: ${advice}`] : []),
  ]);
  return { key: `ev:${e.id}`, placement: 'reply', text, blocks: limitBlocks(blocks) };
}

function summaryMessage(meta: IncidentMeta, events: readonly UnstickLoggedEvent[], fin: Ev<'finished'>): MessageView {
  const approvals = events.filter((e): e is Ev<'approval_decided'> => e.type === 'approval_decided');
  const sent = events.filter((e): e is Ev<'signalled'> => e.type === 'signalled' && e.result === 'sent');
  // "Not signalled" means never signalled: a process refused first and killed later is in "Signalled" only.
  const skipped = neverSignalled(events.filter((e): e is Ev<'signalled'> => e.type === 'signalled'));
  const unknown = unanswered(events);
  const verdict = [...events].reverse().find((e): e is Ev<'verdict'> => e.type === 'verdict');
  const lines = [
    `*Summary* · ${verdict ? verdict.verdict.title : fin.outcome} · took ${seconds(fin.durationMs)}`,
    `Asked by ${mention(meta.requester)}${meta.reason ? ` (reason: ${esc(meta.reason)})` : ''}`,
    approvals.length > 0
      ? approvals
          .map((a) => `${a.decision === 'approved' ? 'Approved' : 'Denied'} by ${mention(a.by)} at ${stamp(a.at)}`)
          .join('\n')
      : 'No host-level step was approved.',
    sent.length > 0
      ? `Signalled:\n${sent.map((s) => `• SIG${s.signal} → PID ${s.containerPid} (host PID ${s.hostPid}) ${code(clipChars(s.cmdline, 80))}`).join('\n')}`
      : unknown.length > 0
        ? 'No signal is recorded as delivered.'
        : 'Nothing was signalled.',
    ...(unknown.length > 0
      ? [
          `May have been signalled (the signal command was being sent and no answer was recorded):\n${unknown.map((u) => `• SIG${u.signal} → PID ${u.containerPid} (host PID ${u.hostPid}) ${code(clipChars(u.cmdline, 80))}`).join('\n')}`,
        ]
      : []),
    ...(skipped.length > 0
      ? [
          `Not signalled:\n${skipped.map((s) => `• PID ${s.containerPid} (host PID ${s.hostPid}) ${code(clipChars(s.cmdline, 80))}: ${OUTCOME_WORDS[signalOutcome(s)]}${s.reason ? ` (${esc(s.reason)})` : ''}`).join('\n')}`,
        ]
      : []),
  ];
  const all = lines.flatMap((l) => l.split('\n'));
  return { key: 'summary', placement: 'reply', text: fallbackText(all), blocks: limitBlocks(sectionsOf(all)) };
}

function parentState(events: readonly UnstickLoggedEvent[]): string {
  const verdict = [...events].reverse().find((e): e is Ev<'verdict'> => e.type === 'verdict');
  const fin = events.find((e) => e.type === 'finished');
  if (fin && verdict) return `${verdict.verdict.title}`;
  if (fin) return fin.type === 'finished' ? `finished (${fin.outcome})` : 'finished';
  const open = events
    .filter((e): e is Ev<'approval_requested'> => e.type === 'approval_requested')
    .find(
      (r) =>
        !events.some(
          (e) => (e.type === 'approval_decided' || e.type === 'approval_expired') && e.approvalId === r.approvalId,
        ),
    );
  if (open) return `:raised_hand: waiting for a second person's approval (expires ${stamp(open.expiresAt)})`;
  const running = events
    .filter((e): e is Ev<'step_started'> => e.type === 'step_started')
    .find((s) => !events.some((e) => e.type === 'step_finished' && e.stepId === s.stepId));
  if (running) return `:gear: ${KIND_TITLE[running.kind].toLowerCase()}…`;
  if (events.some((e) => e.type === 'diagnosis')) return ':mag: diagnosed, planning…';
  return ':hourglass_flowing_right: taking the before snapshot…';
}

/** The whole unstick thread as it should look given the log so far. Pure and deterministic. */
export function renderUnstick(meta: IncidentMeta, logged: readonly AnyLoggedEvent[]): MessageView[] {
  const events = logged.filter((e): e is UnstickLoggedEvent => !e.type.startsWith('alert_'));
  const parentText = `:wrench: Unstick ${meta.targets.map(code).join(', ')}, requested by ${mention(meta.requester)}${meta.reason ? ` · reason: ${esc(meta.reason)}` : ''} · ${parentState(events)}`;
  const views: MessageView[] = [
    {
      key: 'parent',
      placement: 'parent',
      text: parentText,
      blocks: [section(parentText), context(`incident ${code(meta.id)} · ${stamp(meta.createdAt)}`)],
    },
  ];
  // Each root cause is said once in the thread, where it is first said (the before table, as in
  // `/gpu status`); the host's table and the diagnosis below do not repeat it.
  const saidWhy = new Set<string>();
  for (const e of events) {
    switch (e.type) {
      case 'snapshot':
        if (e.label === 'status') break;
        views.push(
          ...snapshotViews(
            `ev:${e.id}`,
            e.snapshot,
            `${e.label === 'before' ? 'Before' : 'After'} · ${code(e.snapshot.machineId)}`,
            // The diagnosis below names the holders; fuser's rows stay with their table.
            { details: 'inline', saidWhy: new Set(saidWhy) },
          ),
        );
        for (const c of e.snapshot.rootCauses ?? []) saidWhy.add(c.sentence);
        break;
      case 'diagnosis':
        views.push(diagnosisMessage(e, new Set(saidWhy)));
        for (const c of e.diagnosis.causes ?? []) saidWhy.add(c.sentence);
        break;
      case 'step_started':
        // A worker that took over after a crash may log the same step's start again: one message per step.
        if (views.some((v) => v.key === `step:${e.stepId}`)) break;
        views.push(stepMessage(e, events));
        break;
      case 'approval_requested':
        views.push(approvalCard(e, events, meta.requester));
        break;
      case 'approval_reminded':
      case 'approval_escalated':
      case 'approval_expired': {
        const req = events.find(
          (x): x is Ev<'approval_requested'> => x.type === 'approval_requested' && x.approvalId === e.approvalId,
        );
        if (!req) break;
        views.push(
          e.type === 'approval_reminded'
            ? reminderMessage(e, req, meta.requester)
            : e.type === 'approval_escalated'
              ? escalationMessage(e, req, meta.requester)
              : expiryMessage(e, req, events, meta.requester, meta.targets.join(', ')),
        );
        break;
      }
      case 'verdict':
        views.push(verdictMessage(e, meta.targets.join(', ')));
        break;
      case 'finished':
        views.push(summaryMessage(meta, events, e));
        break;
      case 'error':
      case 'machine_error': {
        const text = `:warning: ${e.type === 'machine_error' ? `${code(e.machineId)}: ` : ''}${esc(e.message)} (${esc(e.code)})`;
        views.push({ key: `ev:${e.id}`, placement: 'reply', text, blocks: [section(text)] });
        break;
      }
      default:
        break;
    }
  }
  return views;
}
