import type { types } from '@slack/bolt';
import type { Alert } from '../watchdog/judge.ts';
import type { MachineGlance } from '../watchdog/watch-glance.ts';
import { sectionsOf } from './blocks.ts';
import { code, mention, text } from './escape.ts';
import { countRounded, plural } from '../text/units.ts';

/**
 * The App Home tab, so the fleet's state can be seen without asking: the fleet at a glance, the open alerts
 * and the unstick incidents in progress, as one Block Kit `home` view for `views.publish`. Pure:
 * src/slack/home.ts reads Redis into a `HomeModel` and publishes what this returns.
 *
 * Slack's limits for a Home view (docs.slack.dev/reference/views/home-tab-views, views.publish):
 * at most 100 blocks, a section's text at most 3,000 characters, a header's 150, and the view at
 * most 250 kB (`view_too_large`). Nothing is dropped silently: lines are packed into as few
 * sections as they need, troubled machines first, and what does not fit is counted in a last line
 * ("+N more machines, see `/gpu status all`"). Every value read from Redis goes through
 * src/render/escape.ts where it meets the template.
 */

type KnownBlock = types.KnownBlock;

export const HOME_BLOCKS_MAX = 100;
/** The context line that says when the view was read (the only part that changes with the clock alone). */
export const HOME_SUMMARY_BLOCK_ID = 'home_summary';
/** Bytes of the view's JSON; Slack refuses more than 250 kB, this leaves room for Slack's own fields. */
const HOME_BYTES_MAX = 200_000;

export interface HomeMachine {
  id: string;
  /** The watchdog's last reading of it; null when it was never read (or the stored reading is unreadable). */
  glance: MachineGlance | null;
  /** A reading is stored but is not a valid MachineGlance. */
  unreadable?: boolean;
}

export interface HomeAlert {
  incidentId: string;
  /** The alert as its latest raised/updated/cleared event says; null when no such event could be read. */
  alert: Alert | null;
  cleared: boolean;
  /** ISO time the latest snooze of it ends, when one was recorded after it was raised. */
  snoozedUntil: string | null;
}

export type HomeIncidentState = 'queued' | 'running' | 'waiting for approval';

export interface HomeIncident {
  id: string;
  targets: string[];
  requester: string;
  state: HomeIncidentState;
  createdAt: string;
}

/**
 * Where an unstick incident stands, from its events alone: null once it finished (a `finished`
 * event), else waiting for an approval nobody decided yet, running once a worker took it, or queued.
 */
export function unstickStateOf(events: readonly { type: string; approvalId?: string }[]): HomeIncidentState | null {
  if (events.some((e) => e.type === 'finished')) return null;
  const decided = new Set(
    events.flatMap((e) =>
      (e.type === 'approval_decided' || e.type === 'approval_expired') && e.approvalId !== undefined
        ? [e.approvalId]
        : [],
    ),
  );
  if (events.some((e) => e.type === 'approval_requested' && e.approvalId !== undefined && !decided.has(e.approvalId)))
    return 'waiting for approval';
  return events.some((e) => e.type === 'started') ? 'running' : 'queued';
}

export interface HomeModel {
  /** When the model was read (ms). */
  now: number;
  /** Every inventory machine, in inventory order. */
  machines: HomeMachine[];
  /** Open alerts, newest first. */
  alerts: HomeAlert[];
  /** Unstick incidents not finished, newest first. */
  incidents: HomeIncident[];
  /** RAM % from which a machine counts as in trouble (GPU_MEDIC_WATCH_RAM_PCT). */
  ramPct: number;
  /** A reading older than this (ms) is shown as stale. */
  staleAfterMs: number;
}

export interface HomeRenderOptions {
  maxBlocks?: number;
  maxBytes?: number;
}

/** `12:03 UTC` on the day of `now`, else `2026-11-30 12:03 UTC`. */
function clockOf(ms: number, now: number): string {
  if (!Number.isFinite(ms)) return 'an unknown time';
  const iso = new Date(ms).toISOString();
  const day = iso.slice(0, 10);
  const hm = iso.slice(11, 16);
  return day === new Date(now).toISOString().slice(0, 10) ? `${hm} UTC` : `${day} ${hm} UTC`;
}

function ageText(ms: number): string {
  const min = Math.floor(ms / 60_000);
  if (min < 120) return plural(Math.max(1, min), 'min', 'min');
  const h = Math.floor(min / 60);
  return h < 48 ? plural(h, 'hour', 'hours') : plural(Math.floor(h / 24), 'day', 'days');
}

/** 0 most urgent … 3 healthy: the order machines are listed in, so a cut hides only the calmest. */
function rank(m: HomeMachine, model: HomeModel): number {
  const g = m.glance;
  if (g === null) return m.unreadable ? 1 : 2;
  if (!g.ok || g.openAlerts > 0) return 0;
  if (g.ramPct !== null && g.ramPct >= model.ramPct) return 0;
  if (model.now - g.at > model.staleAfterMs) return 1;
  return 3;
}

function machineLine(m: HomeMachine, model: HomeModel): string {
  const id = code(m.id);
  const g = m.glance;
  if (g === null) {
    return m.unreadable
      ? `:warning: ${id} · its last reading is stored in a form gpu-medic cannot read; the next watchdog round rewrites it`
      : `:white_circle: ${id} · never read by the watchdog yet`;
  }
  const parts: string[] = [];
  const troubled = !g.ok || g.openAlerts > 0 || (g.ramPct !== null && g.ramPct >= model.ramPct);
  const icon = !g.ok ? ':red_circle:' : troubled ? ':large_orange_circle:' : ':large_green_circle:';
  if (!g.ok) parts.push(`not read: ${text(g.code ?? 'unknown error')}`);
  else {
    parts.push(plural(g.gpus, 'GPU', 'GPUs'));
    if (g.gpus > 0)
      parts.push(`${countRounded(g.gpuMemoryUsedMiB)} / ${countRounded(g.gpuMemoryTotalMiB)} MiB GPU memory`);
    parts.push(
      g.ramPct === null
        ? 'RAM not read'
        : `RAM ${countRounded(g.ramPct)} %${g.ramPct >= model.ramPct ? ' :warning:' : ''}`,
    );
  }
  if (g.openAlerts > 0) parts.push(`*${plural(g.openAlerts, 'open alert', 'open alerts')}*`);
  const age = model.now - g.at;
  parts.push(`read ${clockOf(g.at, model.now)}${age > model.staleAfterMs ? ` (stale: ${ageText(age)} old)` : ''}`);
  return `${icon} ${id} · ${parts.join(' · ')}`;
}

function alertLine(a: HomeAlert, model: HomeModel): string {
  const id = code(a.incidentId);
  if (a.alert === null)
    return `:warning: alert ${id}: its events could not be read (\`gpu-medic incident ${a.incidentId.replace(/[^a-z0-9_]/g, '')}\` shows what the log holds)`;
  const al = a.alert;
  // The watchdog's sentences name the GPU themselves ("GPU 3: …", "… on GPU 3 …"): only the machine goes before.
  const where = code(al.machineId);
  const icon = a.cleared ? ':white_check_mark:' : ':rotating_light:';
  const when = a.cleared ? 'cleared' : `since ${clockOf(al.raisedAt ?? al.since, model.now)}`;
  const snooze =
    a.snoozedUntil !== null && Date.parse(a.snoozedUntil) > model.now
      ? ` · snoozed until ${clockOf(Date.parse(a.snoozedUntil), model.now)}`
      : '';
  return `${icon} ${where}: ${text(al.sentence)} · ${when}${snooze} · ${id}`;
}

function incidentLine(i: HomeIncident, model: HomeModel): string {
  const targets = i.targets.length > 0 ? i.targets.map(code).join(', ') : '(no target)';
  const state = i.state === 'waiting for approval' ? '*waiting for approval*' : i.state;
  return `:hammer_and_wrench: ${targets} · ${state} · asked by ${mention(i.requester)} · opened ${clockOf(Date.parse(i.createdAt), model.now)} · ${code(i.id)}`;
}

const bytesOf = (blocks: readonly KnownBlock[]): number => Buffer.byteLength(JSON.stringify(blocks), 'utf8');

/**
 * Sections holding as many of `lines` as fit in `maxBlocks` blocks and `maxBytes` bytes, and when
 * some do not, a last line `more(n)` saying how many were left out. Never a line cut in half.
 */
function fitLines(
  lines: readonly string[],
  maxBlocks: number,
  maxBytes: number,
  more: (n: number) => string,
): KnownBlock[] {
  const build = (k: number): KnownBlock[] =>
    sectionsOf(k < lines.length ? [...lines.slice(0, k), more(lines.length - k)] : lines.slice(0, k));
  const fits = (b: KnownBlock[]): boolean => b.length <= maxBlocks && bytesOf(b) <= maxBytes;
  const all = build(lines.length);
  if (fits(all)) return all;
  let lo = 0;
  let hi = lines.length - 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fits(build(mid))) lo = mid;
    else hi = mid - 1;
  }
  return build(lo);
}

const section = (t: string): KnownBlock => ({ type: 'section', text: { type: 'mrkdwn', text: t } });
const context = (t: string): KnownBlock => ({ type: 'context', elements: [{ type: 'mrkdwn', text: t }] });

/** The Home view of `model`. Pure and deterministic: the same model gives the same view. */
export function renderHome(model: HomeModel, o: HomeRenderOptions = {}): types.HomeView {
  const maxBlocks = o.maxBlocks ?? HOME_BLOCKS_MAX;
  const maxBytes = o.maxBytes ?? HOME_BYTES_MAX;
  const machines = model.machines.map((m, i) => ({ m, i, r: rank(m, model) })).sort((a, b) => a.r - b.r || a.i - b.i);
  const troubled = machines.filter((x) => x.r < 2).length;
  const neverRead = model.machines.filter((m) => m.glance === null && !m.unreadable).length;

  const summary = [
    `Updated ${clockOf(model.now, model.now)}`,
    `${plural(model.machines.length, 'machine', 'machines')}${troubled + neverRead > 0 ? ` (${[troubled > 0 ? `${countRounded(troubled)} with trouble` : '', neverRead > 0 ? `${countRounded(neverRead)} never read` : ''].filter(Boolean).join(', ')})` : ''}`,
    plural(model.alerts.length, 'open alert', 'open alerts'),
    `${plural(model.incidents.length, 'unstick', 'unsticks')} in progress`,
  ].join(' · ');
  const head: KnownBlock[] = [
    { type: 'header', text: { type: 'plain_text', text: 'gpu-medic: the fleet at a glance', emoji: true } },
    { type: 'context', block_id: HOME_SUMMARY_BLOCK_ID, elements: [{ type: 'mrkdwn', text: summary }] },
  ];
  const footer: KnownBlock[] = [
    { type: 'divider' },
    context(
      'Refreshed when alerts or incidents change. `/gpu status all` reads every machine now; `/gpu help` lists the commands.',
    ),
  ];

  // Fixed blocks: head (2), three titles with a divider before the last two (5), footer (2).
  const fixed = head.length + 5 + footer.length;
  let blocksLeft = maxBlocks - fixed;
  let bytesLeft = maxBytes - bytesOf([...head, ...footer]) - 600;

  const alertTitle = section(`*Open alerts* (${countRounded(model.alerts.length)})`);
  const alertBlocks =
    model.alerts.length === 0
      ? [context('No open alerts.')]
      : fitLines(
          model.alerts.map((a) => alertLine(a, model)),
          Math.min(20, Math.max(1, Math.floor(blocksLeft / 4))),
          Math.floor(bytesLeft / 4),
          (n) => `+${countRounded(n)} more open ${n === 1 ? 'alert' : 'alerts'}, each in the alerts channel`,
        );
  blocksLeft -= alertBlocks.length;
  bytesLeft -= bytesOf(alertBlocks);

  const incTitle = section(`*Unsticks in progress* (${countRounded(model.incidents.length)})`);
  const incBlocks =
    model.incidents.length === 0
      ? [context('No unstick in progress.')]
      : fitLines(
          model.incidents.map((i) => incidentLine(i, model)),
          Math.min(10, Math.max(1, Math.floor(blocksLeft / 4))),
          Math.floor(bytesLeft / 4),
          (n) =>
            `+${countRounded(n)} more ${n === 1 ? 'unstick' : 'unsticks'} in progress, each in its thread (\`gpu-medic incidents\` lists them)`,
        );
  blocksLeft -= incBlocks.length;
  bytesLeft -= bytesOf(incBlocks);

  const machTitle = section(
    `*Machines* (${countRounded(model.machines.length)}, troubled first, as the watchdog last read them)`,
  );
  const machBlocks =
    model.machines.length === 0
      ? [context('No machines in the inventory.')]
      : fitLines(
          machines.map((x) => machineLine(x.m, model)),
          Math.max(1, blocksLeft),
          Math.max(4_000, bytesLeft),
          (n) => `+${countRounded(n)} more ${n === 1 ? 'machine' : 'machines'}, see \`/gpu status all\``,
        );

  return {
    type: 'home',
    callback_id: 'gpu_medic_home',
    blocks: [
      ...head,
      alertTitle,
      ...alertBlocks,
      { type: 'divider' },
      incTitle,
      ...incBlocks,
      { type: 'divider' },
      machTitle,
      ...machBlocks,
      ...footer,
    ],
  };
}
