import type { types } from '@slack/bolt';
import type { AnyLoggedEvent } from '../incident/all-events.ts';
import type { IncidentMeta } from '../incident/events.ts';
import { alertEpisode } from '../watchdog/alert-state.ts';
import type { AlertKind } from '../watchdog/judge.ts';
import {
  ALERT_SNOOZE_1D_ACTION_ID,
  ALERT_SNOOZE_1H_ACTION_ID,
  ALERT_SNOOZE_GPU_1D_ACTION_ID,
  ALERT_SNOOZE_GPU_1H_ACTION_ID,
  ALERT_STATUS_ACTION_ID,
  ALERT_UNSTICK_ACTION_ID,
  ALERT_UNSTICK_PICK_ACTION_ID,
  type AlertEvent,
} from '../watchdog/alert-events.ts';
import { contextsOf, fallbackText, limitBlocks } from './blocks.ts';
import { leakedMemoryNext } from './leaked-memory.ts';
import { cell, clipChars, code, mention, rich, text } from './escape.ts';
import { richTextBlock, sentenceParts, type RichLine } from './rich-text.ts';
import type { MessageView } from './status.ts';

type KnownBlock = types.KnownBlock;

/**
 * What a pure renderer may know of the inventory: each machine's kind and, for a container, its
 * host (the shape of `listMachines`). The bot passes it in; an alert on a host offers Unstick for
 * that host's containers, since unstick works on containers.
 */
export interface RenderContext {
  machines?: ReadonlyArray<{ id: string; kind: 'host' | 'container'; hostId?: string }>;
}

/** Slack's limit of options in one static_select. */
const SELECT_OPTIONS_MAX = 100;

/** Each alert kind's title (the message's heading; the post-mortem's name for an alert still open). */
export const ALERT_TITLES: Record<AlertKind, string> = {
  ghost_memory: 'GPU memory held with no process',
  holder_stuck: 'GPU holder stuck',
  ram_high: 'Host RAM high',
  nvidia_smi_failing: 'nvidia-smi failing',
  gpu_error: 'GPU in error',
  gpus_missing: 'GPUs missing',
  unreachable: 'Machine unreachable',
  xid: 'NVIDIA Xid',
  recovery_action: 'GPU recovery action',
  external: 'Alert',
};

/** What to try next, per condition: our own words (already mrkdwn). */
const NEXT: Record<AlertKind, string> = {
  ghost_memory: `memory that no process holds is a leaked context; ${leakedMemoryNext('*Unstick*')}; *Status* shows who holds what now.`,
  holder_stuck:
    'a process in uninterruptible sleep or a zombie does not die on a signal until the kernel lets it go. *Unstick* stops what can be stopped and asks a second person for host-level steps; *Status* shows it now.',
  ram_high:
    'ranks hang or die when the host runs out of RAM. *Status* shows the holders; check host-cache settings (SGLang `--hicache-size` is per tensor-parallel rank).',
  nvidia_smi_failing:
    '*Status* reads it again; if nvidia-smi still fails or hangs, the driver is wedged and the host likely needs a GPU reset or a reboot, which a person decides.',
  gpu_error: '*Status* shows which GPU answers the error and what that error means for the next step.',
  gpus_missing:
    'a GPU that left the bus comes back only after the host is rebooted; *Status* shows which GPUs still answer.',
  unreachable:
    'nothing about its GPUs is known until it answers: check its SSH access (`/gpu doctor`, admins). *Status* tries again.',
  xid: 'the line above says what the Xid means and what to do, or where to read which Xid it was; *Status* shows the GPU now.',
  recovery_action:
    'what the driver asks for is said above; a reset or reboot is for a person to decide. *Status* shows the GPU now.',
  external:
    "what the alert means is its rule's to say (the link above); *Status* reads the machine now, *Unstick* stops what holds its GPUs.",
};

/** An http(s) URL as a Slack link to it, or null: `|`, `<`, `>` and spaces percent-encoded so it cannot end the link or form markup. */
function link(url: string | null, label: string): string | null {
  if (url === null) return null;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return null;
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
  const href = u.href.replace(/[|<>\s"]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
  return `<${href.replace(/&/g, '&amp;')}|${label}>`;
}

const stamp = (ms: number): string => `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
const hhmm = (ms: number): string => `${new Date(ms).toISOString().slice(11, 16)} UTC`;

function lasted(fromMs: number, toMs: number): string {
  const min = Math.round((toMs - fromMs) / 60_000);
  return min < 1 ? 'lasted under 1 min' : `lasted ${min} min`;
}

/** A sentence from the watchdog, its first letter made a capital. */
function capital(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** A snooze scope (`machineId` or `machineId/gpuIndex`) in words. */
function scopeWords(scope: string): string {
  const m = /^(.*)\/(\d{1,2})$/.exec(scope);
  return m ? `GPU ${m[2]} of ${code(m[1] ?? '')}` : `all of ${code(scope)}`;
}

const REFUSED: Record<string, string> = {
  policy: "not allowed by gpu-medic's policy (user or channel)",
  target_locked: 'another unstick held the target',
  queue_unavailable: 'the work queue was not answering',
  not_a_container: 'that is not a container of this host',
  unknown_machine: 'the machine is no longer in the inventory',
};

function actionLine(e: Extract<AlertEvent, { type: 'alert_action' }>): string {
  const what = e.action === 'status' ? 'Status' : e.action === 'unstick' ? 'Unstick' : 'Snooze';
  const on = e.target !== undefined ? ` ${code(e.target)}` : '';
  const result =
    e.refused !== null
      ? `refused: ${REFUSED[e.refused] ?? text(e.refused)}`
      : e.incidentId !== null
        ? `incident ${code(e.incidentId)}`
        : 'done';
  return `${what}${on} by ${mention(e.by)} at ${hhmm(Date.parse(e.at))}: ${result}`;
}

/** The Unstick control: a button for a container, a pick of the host's containers for a host, or why there is none. */
function unstickControl(
  meta: IncidentMeta,
  machineId: string,
  ctx: RenderContext,
): { element: types.ActionsBlockElement | null; note: string | null } {
  const m = ctx.machines?.find((x) => x.id === machineId);
  if (!m) return { element: null, note: null };
  const confirm = (what: string): types.ConfirmationDialog => ({
    title: { type: 'plain_text', text: 'Unstick?' },
    text: {
      type: 'mrkdwn',
      text: `Stops the processes holding ${what}'s GPUs, as you: every rule of \`/gpu unstick\` applies, and host-level steps need a second person.`,
    },
    confirm: { type: 'plain_text', text: 'Unstick' },
    deny: { type: 'plain_text', text: 'Cancel' },
  });
  if (m.kind === 'container')
    return {
      element: {
        type: 'button',
        action_id: ALERT_UNSTICK_ACTION_ID,
        text: { type: 'plain_text', text: clipChars(`Unstick ${cell(machineId)}`, 75) },
        value: meta.id,
        confirm: confirm(code(machineId)),
      },
      note: null,
    };
  const containers = (ctx.machines ?? [])
    .filter((x) => x.kind === 'container' && x.hostId === machineId)
    .map((x) => x.id);
  if (containers.length === 0)
    return {
      element: null,
      note: `No container of ${code(machineId)} is in the inventory, so *Unstick* has nothing to act on here.`,
    };
  const shown = containers.slice(0, SELECT_OPTIONS_MAX);
  return {
    element: {
      type: 'static_select',
      action_id: ALERT_UNSTICK_PICK_ACTION_ID,
      placeholder: { type: 'plain_text', text: 'Unstick a container…' },
      options: shown.map((c) => ({
        text: { type: 'plain_text', text: clipChars(cell(c), 75) },
        value: `${meta.id}|${c}`,
      })),
      confirm: confirm('the chosen container'),
    },
    note:
      containers.length > shown.length
        ? `The Unstick list shows the first ${shown.length} of ${containers.length} containers of ${code(machineId)}; \`/gpu unstick <container>\` reaches the others.`
        : null,
  };
}

/**
 * A watchdog alert as ONE top-level message (placement `parent`, no replies), edited in place as the
 * alert's events arrive: the condition, the machine (and GPU), since when, the watchdog's sentence,
 * what to do next, snoozes and clicks; once cleared, when and how long it lasted, keeping what it
 * said, with no buttons. Pure: the inventory's machines come in through `ctx`.
 */
export function renderAlert(
  meta: IncidentMeta,
  events: readonly AnyLoggedEvent[],
  ctx: RenderContext = {},
): MessageView[] {
  const alertEvents = events.filter((e): e is AlertEvent & { id: string } => e.type.startsWith('alert_'));
  const episode = alertEpisode(alertEvents);
  const { alert, clearedAt, updatedAt, external } = episode;
  const snoozes = new Map<string, { by: string; until: string }>();
  const actions: string[] = [];
  for (const e of alertEvents) {
    if (e.type === 'alert_snoozed') {
      const prev = snoozes.get(e.scope);
      if (!prev || Date.parse(e.until) >= Date.parse(prev.until)) snoozes.set(e.scope, { by: e.by, until: e.until });
    } else if (e.type === 'alert_action') actions.push(actionLine(e));
  }
  if (!alert) return [];
  const machineId = meta.targets[0] ?? alert.machineId;
  const where =
    machineId === ''
      ? 'no machine of the inventory'
      : `${code(machineId)}${alert.gpu === null ? '' : ` GPU ${alert.gpu}`}`;
  const title =
    alert.kind === 'external' && external
      ? text(clipChars(external.alertname, 120))
      : (ALERT_TITLES[alert.kind] ?? text(alert.kind));
  const head =
    clearedAt === null
      ? `:rotating_light: *${title}* on ${where}`
      : `:white_check_mark: *Cleared at ${hhmm(clearedAt)} (${lasted(alert.since, clearedAt)})*: ${title} on ${where}`;
  // The watchdog appends root causes to the sentence as " Why: …" (judge.ts): each on its own line.
  const [what = '', ...whys] = alert.sentence.split(' Why: ');
  const first = capital(what);
  // The sentence as data, so machine text stays inert: a rich_text block, its code as a style, never look-alike
  // backticks in mrkdwn; the fallback text renders the same parts as mrkdwn code spans.
  const saidLines: RichLine[] = [
    { parts: clearedAt === null ? sentenceParts(first) : ['It said: ', ...sentenceParts(first)] },
    ...whys.map((w): RichLine => ({ emoji: 'bulb', parts: ['Why: ', ...sentenceParts(w)] })),
  ];
  const said = saidLines.map((l) => `${l.emoji ? `:${l.emoji}: ` : ''}${rich(l.parts)}`).join('\n');
  const when = [
    `Since ${stamp(alert.since)}`,
    ...(alert.raisedAt !== null && alert.raisedAt !== alert.since ? [`raised ${hhmm(alert.raisedAt)}`] : []),
    ...(updatedAt !== null ? [`updated ${hhmm(updatedAt)}`] : []),
    `alert ${code(meta.id)}`,
  ].join(' · ');
  // Where it came from: the watchdog, Alertmanager (with its rule's name and a link back), or both.
  const fromWatchdog = [...episode.members.values()].some((m) => m.external === null);
  const origin =
    external === null
      ? null
      : [
          `${fromWatchdog ? 'Raised by the watchdog and by Alertmanager' : 'From Alertmanager'}: ${code(clipChars(external.alertname, 120))}`,
          ...[link(external.generatorURL, 'source')].filter((x): x is string => x !== null),
        ].join(' · ');
  const blocks: KnownBlock[] = [
    { type: 'section', text: { type: 'mrkdwn', text: head } },
    richTextBlock(saidLines),
    {
      type: 'context',
      elements: [
        {
          type: 'mrkdwn',
          text:
            origin === null
              ? when
              : `${when}
${origin}`,
        },
      ],
    },
  ];
  const lines: string[] = [head, said, when, ...(origin === null ? [] : [origin])];
  if (clearedAt === null) {
    const next = `*Next:* ${NEXT[alert.kind] ?? ''}`;
    blocks.push({ type: 'section', text: { type: 'mrkdwn', text: next } });
    lines.push(next);
  }
  const notes: string[] = [...snoozes.entries()].map(
    ([scope, s]) =>
      `:zzz: ${scopeWords(scope)} snoozed until ${stamp(Date.parse(s.until))} by ${mention(s.by)}: the watchdog raises no new alert there until then`,
  );
  notes.push(...actions.slice(-10));
  if (actions.length > 10) notes.push(`(${actions.length - 10} earlier clicks are in the incident log)`);
  const unmatched = machineId === '' ? (external?.unmatched ?? 'it names no machine') : null;
  if (clearedAt === null && unmatched !== null) {
    notes.push(
      `No buttons: ${text(clipChars(unmatched, 300))}. Map it with GPU_MEDIC_ALERTMANAGER_RENAME (docs/alertmanager.md), or use \`/gpu status <machine>\`.`,
    );
    blocks.push(...contextsOf(notes));
  } else if (clearedAt === null) {
    const elements: types.ActionsBlockElement[] = [
      {
        type: 'button',
        action_id: ALERT_STATUS_ACTION_ID,
        text: { type: 'plain_text', text: clipChars(`Status ${cell(machineId)}`, 75) },
        value: meta.id,
      },
    ];
    const unstick = unstickControl(meta, machineId, ctx);
    if (unstick.element) elements.push(unstick.element);
    if (unstick.note) notes.push(unstick.note);
    elements.push(
      {
        type: 'button',
        action_id: ALERT_SNOOZE_1H_ACTION_ID,
        text: { type: 'plain_text', text: 'Snooze 1 h' },
        value: meta.id,
      },
      {
        type: 'button',
        action_id: ALERT_SNOOZE_1D_ACTION_ID,
        text: { type: 'plain_text', text: 'Snooze 1 day' },
        value: meta.id,
      },
    );
    if (alert.gpu !== null)
      elements.push(
        {
          type: 'button',
          action_id: ALERT_SNOOZE_GPU_1H_ACTION_ID,
          text: { type: 'plain_text', text: `Snooze GPU ${alert.gpu} 1 h` },
          value: meta.id,
        },
        {
          type: 'button',
          action_id: ALERT_SNOOZE_GPU_1D_ACTION_ID,
          text: { type: 'plain_text', text: `Snooze GPU ${alert.gpu} 1 day` },
          value: meta.id,
        },
      );
    if (notes.length > 0) blocks.push(...contextsOf(notes));
    // A new block_id per version, as Slack asks of updated messages (a client keeps no stale pick).
    blocks.push({ type: 'actions', block_id: `gpu_alert_actions_${alertEvents.length}`, elements });
  } else if (notes.length > 0) blocks.push(...contextsOf(notes));
  lines.push(...notes);
  return [{ key: 'parent', placement: 'parent', text: fallbackText(lines), blocks: limitBlocks(blocks) }];
}
