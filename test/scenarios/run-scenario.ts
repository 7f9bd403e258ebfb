/**
 * Plays a scenario end to end through the real system (startStack: real Redis, BullMQ workers,
 * sshd fleet, the Bolt HTTP receiver and the fake Slack Web API) and returns one JSON report.
 *
 * A report with `broken` set means the run itself failed (bad file, fleet or stack did not start,
 * the harness threw). Everything the bot did wrong (a wrong signal, a missing card, a timeout
 * waiting for a thread) is recorded in the report and leaves `broken` null.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { IncidentLog } from '../../src/incident/log.ts';
import type { Inventory } from '../../src/config/inventory.ts';
import type { FleetProcess, GpuMemoryReading, SignalRecord } from '../harness/fleet/types.ts';
import { blockActionPayload, sendInteraction, staticSelectPayload } from '../harness/slack/signed-request.ts';
import type { RecordedCall, StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { startStack, type Stack } from '../harness/stack.ts';
import { payload, postAlerts } from '../alertmanager/am-rig.ts';
import {
  ALERT_SNOOZE_1D_ACTION_ID,
  ALERT_SNOOZE_1H_ACTION_ID,
  ALERT_SNOOZE_GPU_1D_ACTION_ID,
  ALERT_SNOOZE_GPU_1H_ACTION_ID,
  ALERT_STATUS_ACTION_ID,
  ALERT_UNSTICK_ACTION_ID,
  ALERT_UNSTICK_PICK_ACTION_ID,
} from '../../src/watchdog/alert-events.ts';
import {
  loadScenario,
  toRegExp,
  userIds,
  type AlertClick,
  type AmAlert,
  type AlertCondition,
  type Condition,
  type MachineChange,
  type ProcessChange,
  type Scenario,
  type Step,
} from './schema.ts';

// ---------------------------------------------------------------------------------------------
// Report shape

export interface SlackCallReport {
  /** ms since the first step. */
  t: number;
  /** Web API method, or `response_url` for a POST to a slash command's / interaction's response URL. */
  method: string;
  channel: string | null;
  /** thread_ts the call posted into (replies), else null. */
  thread: string | null;
  /** ts of the message posted (from the response) or updated (chat.update). */
  ts: string | null;
  /** Ephemeral recipient (chat.postEphemeral). */
  user: string | null;
  text: string | null;
  blocks: unknown[] | null;
  /** response_url posts: ephemeral / in_channel, replace_original. */
  responseType: string | null;
  status: number;
  ok: boolean;
  error: string | null;
}

export interface CommandReport {
  t: number;
  cmd: string;
  via: 'ssh' | 'tool';
}

export interface SignalReport {
  t: number;
  machine: string;
  /** Name of the holder/bystander in the scenario, null if the fleet did not start it. */
  process: string | null;
  kind: 'holder' | 'bystander';
  hostPid: number;
  containerPid: number | null;
  cmdline: string;
  signal: string;
  /** Sender PID as the receiver's namespace sees it: 0 = from outside its namespace, null = not observable (SIGKILL). */
  byPid: number | null;
  by: string;
}

export interface StepReport {
  index: number;
  /** The step as written (after parsing: durations in ms). */
  step: Step;
  user: string | null;
  userId: string | null;
  t: number;
  ms: number;
  /** What happened; shape depends on the step. */
  result: Record<string, unknown>;
  /** The bot-side reason this step could not do what it says (no card to click, wait timed out). */
  problem: string | null;
}

export interface IncidentReport {
  id: string;
  /** The `id:` of the command step that opened it, if any. */
  label: string | null;
  kind: string | null;
  requester: string | null;
  text: string | null;
  channel: string | null;
  /** Over: `finished`/`error` event, or (status) every target read or failed. */
  finished: boolean;
  /** Time of the event that completed it, and ms from `requested` to then. */
  completedAt: string | null;
  durationMs: number | null;
  /** The thread as Slack shows it at the end (parent first). */
  thread: Array<{ ts: string; text: string; blocks: unknown[] | null; edits: number }>;
  events: Array<{ id: string; type: string; at: string; [k: string]: unknown }>;
}

/** One watchdog alert episode (an incident of kind `alert`) and what the alerts channel shows of it. */
export interface AlertReport {
  id: string;
  /** The alert key (meta.text), e.g. `kpro5/ghost_memory/GPU-…`. */
  key: string;
  kind: string | null;
  machine: string | null;
  /** Host GPU index when the alert is about one GPU. */
  gpu: number | null;
  createdAt: string;
  raised: number;
  updated: number;
  cleared: boolean;
  snoozed: number;
  actions: number;
  /** Top-level messages in the alerts channel that are this episode's (one, unless doubled). */
  messages: Array<{ ts: string; text: string; edits: number }>;
  events: Array<{ id: string; type: string; at: string; [k: string]: unknown }>;
}

export interface ExpectationResult {
  check: string;
  ok: boolean;
  detail: string;
}

export interface Report {
  scenario: { name: string; file: string | null; description: string | null; pending: string | null };
  startedAt: string;
  /** Fleet + stack start time. */
  startupMs: number;
  /** First step to end of settle. */
  runMs: number;
  broken: { stage: 'load' | 'start' | 'setup' | 'steps' | 'collect'; message: string } | null;
  /** Where this run lived (both are gone after it: the fleet dir removed, the Redis keys deleted). */
  where: { fleetDir: string | null; redisPrefix: string | null };
  users: Record<string, string>;
  approvers: string[];
  steps: StepReport[];
  slack: { calls: SlackCallReport[] };
  /** Every command each machine received (ssh command lines and fake tool invocations), t < 0 = during setup. */
  commands: Record<string, CommandReport[]>;
  signals: SignalReport[];
  /** Final GPU memory per host. */
  gpuMemory: Record<string, GpuMemoryReading[]>;
  /** Processes the scenario started: name → pids and whether each is still alive at the end. */
  processes: Record<
    string,
    {
      machine: string;
      kind: 'holder' | 'bystander';
      hostPid: number;
      containerPid: number | null;
      startTime: number;
      cmdline: string;
      alive: boolean;
    }
  >;
  incidents: IncidentReport[];
  /** Watchdog alert episodes (settings.watch), oldest first, and the alerts channel's messages no incident claims. */
  alerts: AlertReport[];
  alertsChannel: { channel: string | null; unclaimed: Array<{ ts: string; text: string }> };
  /** What each user saw privately: slash-command acks, response_url answers (e.g. click refusals), ephemerals. */
  answers: Array<{ t: number; user: string; via: 'ack' | 'response_url' | 'ephemeral'; text: string }>;
  /** Incidents that had not finished rendering when the settle time ran out. */
  unfinished: string[];
  /** Error-level lines the bot and workers logged. */
  errorLogs: string[];
  expectations: ExpectationResult[];
}

export interface RunOptions {
  /** Progress lines (the CLI prints them to stderr). */
  log?: (line: string) => void;
}

// ---------------------------------------------------------------------------------------------
// The running scenario (shared with the demo)

type LooseEvent = { id: string; type: string; at: string; [k: string]: unknown };

export interface Card {
  ts: string;
  threadTs: string;
  channel: string;
  blocks: unknown[];
  text: string;
  buttons: Array<{ which: 'approve' | 'deny'; actionId: string; value: string; text: string }>;
}

interface TrackedIncident {
  id: string;
  label: string | null;
  channel: string;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const strOrNull = (v: unknown): string | null => (typeof v === 'string' ? v : typeof v === 'number' ? String(v) : null);

/** What a person reads in a message: its text plus every text in its blocks (sections, context, table cells). */
function visibleText(m: { text: string; blocks?: unknown[] | null }): string {
  const out = [m.text];
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (isRecord(v)) {
      if (typeof v.text === 'string') out.push(v.text);
      for (const [k, x] of Object.entries(v)) if (k !== 'text' || typeof x !== 'string') walk(x);
    }
  };
  walk(m.blocks ?? []);
  return out.join('\n');
}

/** Buttons of a message: the approval card's approve/deny. */
export function cardButtons(blocks: unknown): Card['buttons'] {
  const out: Card['buttons'] = [];
  if (!Array.isArray(blocks)) return out;
  for (const b of blocks) {
    if (!isRecord(b) || b.type !== 'actions' || !Array.isArray(b.elements)) continue;
    for (const el of b.elements) {
      if (!isRecord(el) || el.type !== 'button') continue;
      const actionId = strOrNull(el.action_id) ?? '';
      const value = strOrNull(el.value) ?? '';
      const text = isRecord(el.text) ? (strOrNull(el.text.text) ?? '') : '';
      if (actionId === 'gpu_approve') out.push({ which: 'approve', actionId, value, text });
      else if (actionId === 'gpu_deny') out.push({ which: 'deny', actionId, value, text });
    }
  }
  return out;
}

/**
 * When an incident is over: unstick appends `finished`; status incidents have no such event and
 * are over (as the renderer says "done") once every target has a snapshot or a machine_error.
 * Returns the time of the event that completed it, or null while it is open.
 */
function completedAt(meta: { kind: string; targets: string[] } | null, events: readonly LooseEvent[]): string | null {
  const fin = events.find((e) => e.type === 'finished' || e.type === 'error');
  if (fin) return fin.at;
  if (!meta || (meta.kind !== 'status' && meta.kind !== 'status_all')) return null;
  let last: string | null = null;
  for (const t of meta.targets) {
    const e = events.find(
      (x) =>
        (x.type === 'snapshot' || x.type === 'machine_error') &&
        (x.type === 'machine_error' ? x.machineId === t : isRecord(x.snapshot) && x.snapshot.machineId === t),
    );
    if (!e) return null;
    if (last === null || e.at > last) last = e.at;
  }
  return last;
}

/** An interactive element of a message (button or select), wherever its block holds it. */
export interface Control {
  type: string;
  actionId: string;
  blockId: string;
  value: string | null;
  text: string;
  placeholder: unknown;
  options: Array<{ text: { type: string; text: string }; value: string }>;
}

/** Buttons and selects of a message: in actions blocks and as section accessories. */
export function alertControls(blocks: unknown): Control[] {
  const out: Control[] = [];
  if (!Array.isArray(blocks)) return out;
  const add = (el: unknown, blockId: string) => {
    if (!isRecord(el) || typeof el.action_id !== 'string') return;
    const options = (
      Array.isArray(el.options)
        ? el.options
        : Array.isArray(el.option_groups)
          ? el.option_groups.flatMap((g: unknown) => (isRecord(g) && Array.isArray(g.options) ? g.options : []))
          : []
    )
      .filter(isRecord)
      .map((op) => ({
        text: isRecord(op.text)
          ? { type: strOrNull(op.text.type) ?? 'plain_text', text: strOrNull(op.text.text) ?? '' }
          : { type: 'plain_text', text: '' },
        value: strOrNull(op.value) ?? '',
      }));
    out.push({
      type: strOrNull(el.type) ?? '?',
      actionId: el.action_id,
      blockId,
      value: strOrNull(el.value),
      text: isRecord(el.text)
        ? (strOrNull(el.text.text) ?? '')
        : isRecord(el.placeholder)
          ? (strOrNull(el.placeholder.text) ?? '')
          : '',
      placeholder: el.placeholder,
      options,
    });
  };
  for (const b of blocks) {
    if (!isRecord(b)) continue;
    const blockId = strOrNull(b.block_id) ?? '';
    if (Array.isArray(b.elements)) for (const el of b.elements) add(el, blockId);
    if (b.accessory !== undefined) add(b.accessory, blockId);
  }
  return out;
}

/** Action ids per button (src/watchdog/alert-events.ts): a GPU's snoozes have their own; a host alert's Unstick is a pick. */
const ALERT_ACTION_IDS: Record<AlertClick['button'], { machine: string[]; gpu: string[] }> = {
  status: { machine: [ALERT_STATUS_ACTION_ID], gpu: [ALERT_STATUS_ACTION_ID] },
  unstick: {
    machine: [ALERT_UNSTICK_ACTION_ID, ALERT_UNSTICK_PICK_ACTION_ID],
    gpu: [ALERT_UNSTICK_ACTION_ID, ALERT_UNSTICK_PICK_ACTION_ID],
  },
  'snooze-1h': { machine: [ALERT_SNOOZE_1H_ACTION_ID], gpu: [ALERT_SNOOZE_GPU_1H_ACTION_ID] },
  'snooze-1d': { machine: [ALERT_SNOOZE_1D_ACTION_ID], gpu: [ALERT_SNOOZE_GPU_1D_ACTION_ID] },
};

/**
 * The control a click means: the button's action id (with `gpu`, a snooze is the GPU's own button);
 * an Unstick select (a host alert) needs the container, matched by option value
 * (`<alert id>|<container>`) or text.
 */
export function pickControl(
  controls: readonly Control[],
  c: Pick<AlertClick, 'button' | 'gpu' | 'container'>,
): { control: Control; option: Control['options'][number] | null } | { reason: string } {
  const snooze = c.button === 'snooze-1h' || c.button === 'snooze-1d';
  const ids = ALERT_ACTION_IDS[c.button][snooze && c.gpu !== undefined ? 'gpu' : 'machine'];
  const control = controls.find((x) => ids.includes(x.actionId));
  if (!control) {
    const which = snooze
      ? c.gpu === undefined
        ? `machine-wide ${c.button} button`
        : `${c.button} button for GPU ${c.gpu}`
      : `${c.button} control`;
    return {
      reason: `the alert's message has no ${which} (action id ${ids.join(' or ')}; it has: ${controls.map((x) => x.actionId).join(', ') || 'none'})`,
    };
  }
  if (control.type !== 'static_select') {
    if (c.container !== undefined)
      return {
        reason: `the alert's Unstick is a button, there is no container to choose (it unsticks its own machine)`,
      };
    return { control, option: null };
  }
  if (c.container === undefined)
    return {
      reason: `the alert's Unstick is a select of containers (${control.options.map((o) => o.text.text).join(', ')}): say which with container:`,
    };
  const want = c.container;
  const option =
    control.options.find((o) => o.value === want || o.value.endsWith(`|${want}`)) ??
    control.options.find((o) => o.text.text === want);
  if (!option)
    return {
      reason: `the Unstick select offers no ${want} (it offers: ${control.options.map((o) => o.text.text).join(', ') || 'nothing'})`,
    };
  return { control, option };
}

export class ScenarioRuntime {
  readonly users: Record<string, string>;
  readonly approverIds: string[];
  readonly processes = new Map<string, { kind: 'holder' | 'bystander'; p: FleetProcess }>();
  readonly incidents: TrackedIncident[] = [];
  readonly log: IncidentLog;
  /** response_url → user name, for attributing the bot's private answers. */
  readonly urlUser = new Map<string, string>();
  readonly acks: Array<{ at: number; user: string; text: string }> = [];
  /** Date.now() when the first step started (set by play or by the demo). */
  t0 = Date.now();

  /** When an alert of an `alertmanager:` step first fired (its startsAt), by fingerprint. */
  private readonly amStarts = new Map<string, string>();

  private constructor(
    readonly scenario: Scenario,
    readonly stack: Stack,
    /** The bearer token the bot's Alertmanager receiver takes (set when a step posts to it). */
    readonly alertmanagerToken: string | null,
  ) {
    this.users = userIds(scenario);
    this.approverIds = scenario.approvers.map((a) => this.users[a] ?? a);
    this.log = new IncidentLog(stack.redis, stack.prefix);
  }

  /** Starts the fleet and the stack, the scenario's processes, leaks and faults. */
  static async start(scenario: Scenario): Promise<ScenarioRuntime> {
    const users = userIds(scenario);
    const approvers = scenario.approvers.map((a) => users[a] ?? a);
    const st = scenario.settings;
    const env: Record<string, string> = { GPU_MEDIC_APPROVERS: approvers.join(',') };
    if (st.approvalTtlSec !== undefined) env.GPU_MEDIC_APPROVAL_TTL_SEC = String(st.approvalTtlSec);
    if (scenario.escalationApprovers.length > 0)
      env.GPU_MEDIC_ESCALATION_APPROVERS = scenario.escalationApprovers.map((a) => users[a] ?? a).join(',');
    if (st.escalateAfterSec !== undefined) env.GPU_MEDIC_ESCALATE_AFTER_SEC = String(st.escalateAfterSec);
    if (st.termGraceSec !== undefined) env.GPU_MEDIC_TERM_GRACE_SEC = String(st.termGraceSec);
    if (st.releaseTimeoutSec !== undefined) env.GPU_MEDIC_RELEASE_TIMEOUT_SEC = String(st.releaseTimeoutSec);
    if (st.pollMs !== undefined) env.GPU_MEDIC_POLL_MS = String(st.pollMs);
    if (st.watch !== undefined) {
      env.GPU_MEDIC_ALERTS_CHANNEL = st.watch.channel;
      env.GPU_MEDIC_WATCH_INTERVAL_SEC = String(st.watch.intervalSec);
      if (st.watch.ghostSec !== undefined) env.GPU_MEDIC_WATCH_GHOST_SEC = String(st.watch.ghostSec);
      if (st.watch.ramPct !== undefined) env.GPU_MEDIC_WATCH_RAM_PCT = String(st.watch.ramPct);
    }
    // An `alertmanager:` step posts to the bot's receiver: the bot (only: the token is its secret) gets one.
    const alertmanagerToken = scenario.steps.some((x) => 'alertmanager' in x) ? randomBytes(24).toString('hex') : null;
    // A worker that a step restarts runs as its own process, so the restart is a real SIGKILL.
    const workerProcess = scenario.steps.some(
      (x) => ('restart' in x && x.restart !== 'bot') || ('down' in x && x.down !== 'bot'),
    );
    const stack = await startStack({
      workerProcess,
      fleet: {
        hosts: scenario.fleet.hosts.map((h) => ({
          id: h.id,
          gpus: h.gpus,
          ...(h.site !== undefined ? { site: h.site } : {}),
          ...(h.ram ? { ramTotalGiB: h.ram.totalGiB, ramUsedGiB: h.ram.usedGiB } : {}),
        })),
        containers: scenario.fleet.containers.map((c) => ({
          id: c.id,
          vmid: c.vmid,
          host: c.host,
          ownAddress: c.ownAddress,
          ...(c.gpus !== undefined ? { gpus: c.gpus } : {}),
          ...(c.privileged !== undefined ? { privileged: c.privileged } : {}),
          ...(c.init !== undefined
            ? { initHolds: { gpus: c.init.gpus, ...(c.init.title !== undefined ? { title: c.init.title } : {}) } }
            : {}),
        })),
      },
      env,
      ...(alertmanagerToken === null ? {} : { botEnv: { GPU_MEDIC_ALERTMANAGER_TOKEN: alertmanagerToken } }),
      tweakInventory: (inv: Inventory) => {
        if (st.commandTimeoutSec !== undefined) inv.defaults.commandTimeoutSec = st.commandTimeoutSec;
        if (st.connectTimeoutSec !== undefined) inv.defaults.connectTimeoutSec = st.connectTimeoutSec;
        for (const c of scenario.fleet.containers) {
          const entry = inv.containers.find((x) => x.id === c.id);
          if (entry && c.sshUser !== undefined) entry.user = c.sshUser;
        }
      },
    });
    const rt = new ScenarioRuntime(scenario, stack, alertmanagerToken);
    try {
      await rt.setup();
    } catch (e) {
      await stack.stop();
      throw e;
    }
    return rt;
  }

  private async setup(): Promise<void> {
    const { fleet } = this.stack;
    const f = this.scenario.fleet;
    for (const c of f.containers) {
      const init = c.init === undefined ? null : fleet.initHolder(c.id);
      if (c.init !== undefined && init !== null) this.processes.set(c.init.name, { kind: 'holder', p: init });
    }
    await Promise.all([
      ...f.holders.map(async (h) => {
        const p = await fleet.spawnHolder(h.machine, {
          gpus: h.gpus,
          ...(h.title !== undefined ? { title: h.title } : {}),
          ...(h.ignoreTerm !== undefined ? { ignoreTerm: h.ignoreTerm } : {}),
          ...(h.user !== undefined ? { user: h.user } : {}),
          ...(h.dieDelay !== undefined ? { dieDelayMs: h.dieDelay } : {}),
          ...(h.parent !== undefined ? { parentTitle: h.parent } : {}),
          ...(h.stuck !== undefined ? { stuck: h.stuck } : {}),
        });
        this.processes.set(h.name, { kind: 'holder', p });
      }),
      ...f.bystanders.map(async (b) => {
        const p = await fleet.spawnBystander(b.machine, {
          title: b.title,
          ...(b.ignoreTerm !== undefined ? { ignoreTerm: b.ignoreTerm } : {}),
          ...(b.user !== undefined ? { user: b.user } : {}),
        });
        this.processes.set(b.name, { kind: 'bystander', p });
      }),
      ...f.leaks.map((l) => fleet.setLeak(l.host, l.gpu, l.mib)),
    ]);
    for (const c of f.faults) await this.applyChange(c);
  }

  async applyChange(c: MachineChange): Promise<void> {
    const { fleet } = this.stack;
    if (c.ram) await fleet.setRam(c.machine, c.ram);
    if (c.leak) await fleet.setLeak(c.machine, c.leak.gpu, c.leak.mib);
    if (c.gpuError) await fleet.setGpuError(c.machine, c.gpuError.kind, c.gpuError.gpu);
    if (c.hang !== undefined) await fleet.setHang(c.machine, c.hang);
    if (c.replaceHostKey) await fleet.replaceHostKey(c.machine);
    if (c.stop) await fleet.stopMachine(c.machine);
    if (c.restart) await fleet.restartContainer(c.machine);
    if (c.start) await fleet.startMachine(c.machine);
    if (c.xid) await fleet.logXid(c.machine, c.xid.gpu, c.xid.xid, c.xid.detail);
    if (c.kernelLog !== undefined) await fleet.kernelLog(c.machine, c.kernelLog);
    if (c.recoveryAction) await fleet.setRecoveryAction(c.machine, c.recoveryAction.gpu, c.recoveryAction.action);
    if (c.gpuGone) await fleet.setGpuGone(c.machine, c.gpuGone.gpu, c.gpuGone.gone);
  }

  /** A mid-run process step: end a named process, or start a new one (optionally on another's PIDs). */
  async applyProcessChange(c: ProcessChange): Promise<Record<string, unknown>> {
    const { fleet } = this.stack;
    if ('release' in c) {
      const e = this.processes.get(c.release);
      if (!e) throw new Error(`no process named ${c.release}`);
      await fleet.releaseStuck(e.p);
      return { released: c.release, hostPid: e.p.hostPid };
    }
    if ('end' in c) {
      const e = this.processes.get(c.end);
      if (!e) throw new Error(`no process named ${c.end}`);
      await fleet.endProcess(e.p);
      return { ended: c.end, hostPid: e.p.hostPid, startTime: e.p.startTime };
    }
    const o = c.start;
    const common = {
      ...(o.title !== undefined ? { title: o.title } : {}),
      ...(o.ignoreTerm !== undefined ? { ignoreTerm: o.ignoreTerm } : {}),
      ...(o.user !== undefined ? { user: o.user } : {}),
    };
    let p: FleetProcess;
    if (o.takePidOf !== undefined) {
      const old = this.processes.get(o.takePidOf)?.p;
      if (!old) throw new Error(`no process named ${o.takePidOf}`);
      p = await fleet.takePid(
        o.machine,
        { hostPid: old.hostPid, ...(old.containerPid !== null ? { containerPid: old.containerPid } : {}) },
        { ...common, ...(o.gpus ? { gpus: o.gpus } : {}) },
      );
    } else if (o.gpus) p = await fleet.spawnHolder(o.machine, { ...common, gpus: o.gpus });
    else p = await fleet.spawnBystander(o.machine, { ...common, title: o.title ?? 'python3' });
    this.processes.set(o.name, { kind: o.gpus ? 'holder' : 'bystander', p });
    return { started: o.name, hostPid: p.hostPid, containerPid: p.containerPid, startTime: p.startTime };
  }

  userId(name: string): string {
    const id = this.users[name];
    if (id === undefined) throw new Error(`unknown user ${name}`);
    return id;
  }

  /**
   * Delivers an Alertmanager notification (webhook v4) to the bot's /alertmanager as Alertmanager
   * does: with the bearer token, each alert's fingerprint made from its labels unless given, and
   * its startsAt the time it first fired here.
   */
  async alertmanager(alerts: readonly AmAlert[]): Promise<{ status: number; body: string }> {
    if (this.alertmanagerToken === null)
      throw new Error('no Alertmanager token: the scenario has no alertmanager step');
    const now = new Date().toISOString();
    const body = payload(
      alerts.map((a) => {
        const fingerprint = a.fingerprint ?? labelsFingerprint(a.labels);
        const startsAt = this.amStarts.get(fingerprint) ?? now;
        this.amStarts.set(fingerprint, startsAt);
        return {
          status: a.status,
          labels: a.labels,
          annotations: a.annotations,
          fingerprint,
          startsAt,
          ...(a.status === 'resolved' ? { endsAt: now } : {}),
          ...(a.generatorURL !== undefined ? { generatorURL: a.generatorURL } : {}),
        };
      }),
    );
    return postAlerts(
      `${this.stack.eventsUrl.replace(/\/slack\/events$/, '')}/alertmanager`,
      body,
      this.alertmanagerToken,
    );
  }

  /** Types a slash command as a user; tracks the incident it opens. */
  async slash(userName: string, typed: string, o: { label?: string | null; channel?: string } = {}) {
    const text = typed.trim().replace(/^\/gpu(\s+|$)/, '');
    const channel = o.channel ?? this.scenario.channel;
    const r = await this.stack.slash(text, { user: this.userId(userName), channel });
    this.urlUser.set(r.responseUrl, userName);
    this.acks.push({ at: Date.now(), user: userName, text: r.ackText || `HTTP ${r.status}` });
    if (r.incidentId !== null) this.incidents.push({ id: r.incidentId, label: o.label ?? null, channel });
    return r;
  }

  incident(label?: string): TrackedIncident | null {
    if (label === undefined) return this.incidents[this.incidents.length - 1] ?? null;
    return this.incidents.find((i) => i.label === label) ?? null;
  }

  /** Parent then replies of an incident's thread as the fake Slack holds it now ([] before the parent exists). */
  thread(inc: TrackedIncident): StoredMessage[] {
    // The parent the outbox tagged for this incident first: an alert message also names the
    // incidents its buttons opened.
    const all = this.stack.slack.messages(inc.channel);
    const parent =
      all.find(
        (m) => m.metadata?.event_payload.incident === inc.id && m.metadata.event_payload.view_key === 'parent',
      ) ?? all.find((m) => m.metadata === undefined && JSON.stringify(m.blocks ?? []).includes(inc.id));
    return parent ? this.stack.slack.thread(inc.channel, parent.ts) : [];
  }

  /** The latest message in the thread that carries approve/deny buttons. */
  latestCard(inc: TrackedIncident): Card | null {
    const t = this.thread(inc);
    const parent = t[0];
    for (let i = t.length - 1; i >= 0; i--) {
      const m = t[i];
      if (!m || !parent) continue;
      const buttons = cardButtons(m.blocks);
      if (buttons.length > 0)
        return { ts: m.ts, threadTs: parent.ts, channel: inc.channel, blocks: m.blocks ?? [], text: m.text, buttons };
    }
    return null;
  }

  /** The card (a message with approve/deny buttons) with this ts in any thread of the channel. */
  cardAt(channel: string, ts: string): Card | null {
    for (const parent of this.stack.slack.messages(channel)) {
      const m = this.stack.slack.thread(channel, parent.ts).find((x) => x.ts === ts);
      if (!m) continue;
      const buttons = cardButtons(m.blocks);
      return buttons.length > 0
        ? { ts: m.ts, threadTs: parent.ts, channel, blocks: m.blocks ?? [], text: m.text, buttons }
        : null;
    }
    return null;
  }

  /** Clicks approve/deny on a card as a user, the way Slack would deliver it (signed block_actions). */
  async click(
    userName: string,
    which: 'approve' | 'deny',
    card: Card,
    responseUrl = this.stack.slack.newResponseUrl(),
  ) {
    const button = card.buttons.find((b) => b.which === which);
    if (!button) return { sent: false as const, reason: `the card has no ${which} button` };
    this.urlUser.set(responseUrl, userName);
    const payload = blockActionPayload({
      user: this.userId(userName),
      userName,
      channel: card.channel,
      messageTs: card.ts,
      threadTs: card.threadTs,
      actionId: button.actionId,
      value: button.value,
      blockId: 'gpu_approval',
      buttonText: button.text,
      responseUrl,
      messageText: card.text,
      messageBlocks: card.blocks,
    });
    const r = await sendInteraction(this.stack.eventsUrl, this.stack.signingSecret, payload);
    return {
      sent: true as const,
      status: r.status,
      body: r.body,
      elapsedMs: Math.round(r.elapsedMs),
      value: button.value,
      cardTs: card.ts,
    };
  }

  async events(id: string): Promise<LooseEvent[]> {
    const evs = await this.log.events(id);
    return evs.map((e): LooseEvent => ({ ...e }));
  }

  async completedAt(id: string): Promise<string | null> {
    return completedAt(await this.log.meta(id), await this.events(id));
  }

  async rendered(id: string): Promise<boolean> {
    return (await this.stack.redis.sismember(`${this.stack.prefix}:dirty`, id)) === 0;
  }

  /** Whether a condition holds now for an incident (an alert condition needs none). */
  async holds(c: Condition, inc: TrackedIncident | null): Promise<boolean> {
    if (typeof c !== 'string' && 'alert' in c) return this.alertHolds(c.alert);
    if (!inc) return false;
    if (typeof c !== 'string') {
      const re = toRegExp(c.threadText);
      return this.thread(inc).some((m) => re.test(visibleText(m)));
    }
    if (c === 'card-posted') return this.latestCard(inc) !== null;
    const evs = await this.events(inc.id);
    const has = (type: string) => evs.some((e) => e.type === type);
    const shown = async () => (await this.rendered(inc.id)) && this.thread(inc).length > 0;
    const done = async (type: string) => has(type) && (await shown());
    switch (c) {
      case 'thread-done':
        return (await this.completedAt(inc.id)) !== null && (await shown());
      case 'card-decided':
        return done('approval_decided');
      case 'card-expired':
        return done('approval_expired');
      case 'verdict':
        return done('verdict');
    }
  }

  async waitFor(c: Condition, inc: TrackedIncident | null, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (await this.holds(c, inc)) return true;
      if (Date.now() > deadline) return false;
      await sleep(50);
    }
  }

  // -------------------------------------------------------------------------------------------
  // Watchdog alerts (settings.watch)

  get alertsChannel(): string | null {
    return this.scenario.settings.watch?.channel ?? null;
  }

  /** Every incident under this run's prefix: the index, and any whose meta the index lacks. */
  async allIncidentIds(): Promise<string[]> {
    const ids = new Set(await this.stack.redis.zrange(`${this.stack.prefix}:incidents`, 0, -1));
    const head = `${this.stack.prefix}:inc:`;
    let cursor = '0';
    do {
      const [next, keys] = await this.stack.redis.scan(cursor, 'MATCH', `${head}*:meta`, 'COUNT', 1000);
      cursor = next;
      for (const k of keys) ids.add(k.slice(head.length, -':meta'.length));
    } while (cursor !== '0');
    return [...ids];
  }

  /** Alert episodes, oldest first, with their messages in the alerts channel as the fake Slack holds them now. */
  async alertReports(): Promise<AlertReport[]> {
    const out: AlertReport[] = [];
    for (const id of await this.allIncidentIds()) {
      const meta = await this.log.meta(id);
      if (meta?.kind !== 'alert') continue;
      const events = await this.events(id);
      const alert = events.map((e) => e.alert).find(isRecord) ?? {};
      const count = (type: string) => events.filter((e) => e.type === type).length;
      const refs = new Set([...(await this.log.slackRefs(id)).values()].map((r) => r.ts));
      const channel = meta.channel;
      // Its own: tagged for it by the outbox (a double post carries the tag too), its recorded ts,
      // or (untagged) naming it. An alert message also names the incidents its buttons opened.
      const messages = this.stack.slack
        .messages(channel)
        .filter((m) =>
          m.metadata !== undefined
            ? m.metadata.event_payload.incident === id
            : refs.has(m.ts) || JSON.stringify(m.blocks ?? []).includes(id) || m.text.includes(id),
        )
        .map((m) => ({ ts: m.ts, text: visibleText(m), edits: m.history.length }));
      out.push({
        id,
        key: meta.text,
        kind: strOrNull(alert.kind),
        machine: strOrNull(alert.machineId) ?? meta.targets[0] ?? null,
        gpu: typeof alert.gpu === 'number' ? alert.gpu : null,
        createdAt: meta.createdAt,
        raised: count('alert_raised'),
        updated: count('alert_updated'),
        cleared: count('alert_cleared') > 0,
        snoozed: count('alert_snoozed'),
        actions: count('alert_action'),
        messages,
        events,
      });
    }
    return out.sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : 1));
  }

  /** Episodes of one alert (kind on machine, or on one GPU), oldest first. */
  async episodes(a: { kind: string; machine: string; gpu?: number | undefined }): Promise<AlertReport[]> {
    return (await this.alertReports()).filter(
      (e) => e.kind === a.kind && e.machine === a.machine && (a.gpu === undefined || e.gpu === a.gpu),
    );
  }

  /** Whether an alert condition holds now: about its latest episode, once rendered into the alerts channel. */
  async alertHolds(c: AlertCondition): Promise<boolean> {
    const eps = await this.episodes(c);
    const latest = eps[eps.length - 1];
    if (!latest || latest.messages.length === 0 || !(await this.rendered(latest.id))) return false;
    const n = c.count ?? 1;
    switch (c.state) {
      case 'raised':
        return latest.raised > 0 && !latest.cleared && eps.filter((e) => e.raised > 0).length >= n;
      case 'updated':
        return latest.updated >= n;
      case 'cleared':
        return latest.cleared && eps.filter((e) => e.cleared).length >= n;
      case 'snoozed':
        return latest.snoozed >= n;
    }
  }

  /**
   * Clicks a button of an alert's message (its latest episode) as a user, the way Slack delivers it:
   * a signed block_actions for that top-level message; an Unstick select sends the chosen option.
   * Status and Unstick clicks are followed until the alert logs the click (`alert_action`), and the
   * incident it opened is tracked under `label`.
   */
  async clickAlert(
    userName: string,
    c: AlertClick,
    o: { label?: string | null; timeoutMs?: number } = {},
  ): Promise<{ sent: boolean; reason: string | null; result: Record<string, unknown> }> {
    const eps = await this.episodes(c);
    const ep = eps[eps.length - 1];
    const what = `${c.kind} alert on ${c.machine}${c.gpu === undefined ? '' : ` GPU ${c.gpu}`}`;
    if (!ep) return { sent: false, reason: `no ${what} was raised`, result: {} };
    const msg = this.stack.slack.messages(this.alertsChannel ?? '').find((m) => ep.messages.some((x) => x.ts === m.ts));
    if (!msg)
      return {
        sent: false,
        reason: `the ${what} (${ep.id}) has no message in the alerts channel`,
        result: { alertIncident: ep.id },
      };
    const found = pickControl(alertControls(msg.blocks), c);
    if ('reason' in found)
      return { sent: false, reason: `${found.reason} (${what}, ${ep.id})`, result: { alertIncident: ep.id } };
    const ctl = found.control;
    const responseUrl = this.stack.slack.newResponseUrl();
    this.urlUser.set(responseUrl, userName);
    const common = {
      user: this.userId(userName),
      userName,
      channel: msg.channel,
      messageTs: msg.ts,
      actionId: ctl.actionId,
      blockId: ctl.blockId,
      responseUrl,
      messageText: msg.text,
      messageBlocks: msg.blocks ?? [],
    };
    const placeholder = isRecord(ctl.placeholder) ? strOrNull(ctl.placeholder.text) : null;
    const payload = found.option
      ? staticSelectPayload({
          ...common,
          selected: { text: found.option.text.text, value: found.option.value },
          ...(placeholder !== null ? { placeholder } : {}),
        })
      : blockActionPayload({ ...common, value: ctl.value ?? '', buttonText: ctl.text });
    const seen = ep.events.length;
    const r = await sendInteraction(this.stack.eventsUrl, this.stack.signingSecret, payload);
    const result: Record<string, unknown> = {
      alertIncident: ep.id,
      status: r.status,
      body: r.body,
      elapsedMs: Math.round(r.elapsedMs),
      actionId: ctl.actionId,
      value: ctl.value,
      ...(found.option ? { option: found.option.value } : {}),
    };
    // The click is logged on the alert: the incident it opened, the snooze, or why it was refused.
    const deadline = Date.now() + (o.timeoutMs ?? DEFAULT_STEP_TIMEOUT);
    const me = this.userId(userName);
    for (;;) {
      const mine = (await this.events(ep.id))
        .slice(seen)
        .find((e) => (e.type === 'alert_action' || e.type === 'alert_snoozed') && e.by === me);
      if (mine?.type === 'alert_snoozed') {
        result.snoozed = { scope: mine.scope, until: mine.until };
        return { sent: true, reason: null, result };
      }
      if (mine) {
        const opened = strOrNull(mine.incidentId);
        result.opened = opened;
        result.refused = strOrNull(mine.refused);
        if (opened !== null) {
          const meta = await this.log.meta(opened);
          this.incidents.push({
            id: opened,
            label: o.label ?? null,
            channel: meta?.channel ?? this.alertsChannel ?? this.scenario.channel,
          });
        }
        return { sent: true, reason: null, result };
      }
      if (Date.now() > deadline)
        return {
          sent: true,
          reason: `the alert logged no ${c.button} click by ${userName} within ${o.timeoutMs ?? DEFAULT_STEP_TIMEOUT} ms (the bot answered HTTP ${r.status})`,
          result,
        };
      await sleep(50);
    }
  }

  async stop(): Promise<void> {
    await this.stack.stop();
  }

  // -------------------------------------------------------------------------------------------
  // Report

  async collect(): Promise<
    Omit<Report, 'scenario' | 'startedAt' | 'startupMs' | 'runMs' | 'broken' | 'steps' | 'unfinished' | 'expectations'>
  > {
    const { fleet, slack } = this.stack;
    const rel = (ms: number) => ms - this.t0;
    const machines = [
      ...this.scenario.fleet.hosts.map((h) => h.id),
      ...this.scenario.fleet.containers.map((c) => c.id),
    ];
    const commands: Record<string, CommandReport[]> = {};
    for (const m of machines) commands[m] = fleet.commandLog(m).map((c) => ({ t: rel(c.ts), cmd: c.cmd, via: c.via }));
    // By the fleet's process id, not the PID: a PID taken over by a new process names the new one.
    const byId = new Map<string, string>();
    for (const [name, { p }] of this.processes) byId.set(p.id, name);
    const signals = fleet.signals().map(
      (s: SignalRecord): SignalReport => ({
        t: rel(s.ts),
        machine: s.machine,
        process: byId.get(s.id) ?? null,
        kind: s.kind,
        hostPid: s.hostPid,
        containerPid: s.containerPid,
        cmdline: s.cmdline,
        signal: s.signal,
        byPid: s.by,
        by:
          s.by === null
            ? 'not observable (SIGKILL)'
            : s.by === 0
              ? 'from outside its PID namespace (host side)'
              : `PID ${s.by} in its own namespace`,
      }),
    );
    const gpuMemory: Record<string, GpuMemoryReading[]> = {};
    for (const h of this.scenario.fleet.hosts) gpuMemory[h.id] = fleet.gpuMemory(h.id);
    const processes: Report['processes'] = {};
    for (const [name, { kind, p }] of this.processes) {
      processes[name] = {
        machine: p.machine,
        kind,
        hostPid: p.hostPid,
        containerPid: p.containerPid,
        startTime: p.startTime,
        cmdline: p.cmdline,
        alive: alive(p.hostPid, p.startTime),
      };
    }
    const calls = slack.calls().map((c) => slackCall(c, rel(c.at)));
    const ids = await this.allIncidentIds();
    for (const t of this.incidents) if (!ids.includes(t.id)) ids.push(t.id);
    const incidents: IncidentReport[] = [];
    for (const id of ids) {
      const meta = await this.log.meta(id);
      const tracked = this.incidents.find((i) => i.id === id);
      const inc: TrackedIncident = tracked ?? { id, label: null, channel: meta?.channel ?? this.scenario.channel };
      const events = await this.events(id);
      const done = completedAt(meta, events);
      const requested = events.find((e) => e.type === 'requested');
      incidents.push({
        id,
        label: inc.label,
        kind: meta?.kind ?? null,
        requester: meta?.requester ?? null,
        text: meta?.text ?? null,
        channel: meta?.channel ?? null,
        finished: done !== null,
        completedAt: done,
        durationMs: done !== null && requested ? Date.parse(done) - Date.parse(requested.at) : null,
        thread: this.thread(inc).map((m) => ({
          ts: m.ts,
          text: m.text,
          blocks: m.blocks ?? null,
          edits: m.history.length,
        })),
        events,
      });
    }
    const errorLogs = this.stack
      .logText()
      .split('\n')
      .filter((l) => {
        try {
          const o: unknown = JSON.parse(l);
          return isRecord(o) && typeof o.level === 'number' && o.level >= 50;
        } catch {
          return false;
        }
      });
    const alerts = this.alertsChannel === null ? [] : await this.alertReports();
    const unclaimed: Report['alertsChannel']['unclaimed'] = [];
    if (this.alertsChannel !== null) {
      const refTs = new Set<string>();
      for (const id of ids) for (const r of (await this.log.slackRefs(id)).values()) refTs.add(r.ts);
      for (const m of slack.messages(this.alertsChannel)) {
        const raw = `${m.text}\n${JSON.stringify(m.blocks ?? [])}`;
        const tagged = m.metadata !== undefined && ids.includes(String(m.metadata.event_payload.incident));
        if (!tagged && !refTs.has(m.ts) && !ids.some((id) => raw.includes(id)))
          unclaimed.push({ ts: m.ts, text: visibleText(m) });
      }
    }
    const nameOf = new Map(Object.entries(this.users).map(([n, id]) => [id, n]));
    const answers: Report['answers'] = [
      ...this.acks.map((a) => ({ t: rel(a.at), user: a.user, via: 'ack' as const, text: a.text })),
      ...slack.responses().map((p) => ({
        t: rel(p.at),
        user: this.urlUser.get(p.url) ?? '?',
        via: 'response_url' as const,
        text: p.body.text ?? '',
      })),
      ...slack
        .ephemerals()
        .map((e) => ({ t: rel(e.at), user: nameOf.get(e.user) ?? e.user, via: 'ephemeral' as const, text: e.text })),
    ].sort((a, b) => a.t - b.t);
    return {
      answers,
      where: { fleetDir: this.stack.fleet.dir, redisPrefix: this.stack.prefix },
      users: this.users,
      approvers: this.approverIds,
      slack: { calls },
      commands,
      signals,
      gpuMemory,
      processes,
      incidents,
      alerts,
      alertsChannel: { channel: this.alertsChannel, unclaimed },
      errorLogs,
    };
  }
}

function alive(pid: number, startTime: number): boolean {
  try {
    // Field 22 after the parenthesised comm.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const after = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const state = after[0];
    return Number(after[19]) === startTime && state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

function slackCall(c: RecordedCall, t: number): SlackCallReport {
  const b = c.body;
  const resp = isRecord(c.response) ? c.response : {};
  const ok = c.method === 'response_url' ? c.status === 200 : resp.ok === true;
  return {
    t,
    method: c.method,
    channel: strOrNull(b.channel) ?? strOrNull(resp.channel),
    thread: strOrNull(b.thread_ts),
    ts: strOrNull(resp.ts) ?? strOrNull(b.ts),
    user: strOrNull(b.user),
    text: strOrNull(b.text),
    blocks: Array.isArray(b.blocks) ? b.blocks : null,
    responseType: strOrNull(b.response_type),
    status: c.status,
    ok,
    error: ok ? null : (strOrNull(resp.error) ?? `HTTP ${c.status}`),
  };
}

// ---------------------------------------------------------------------------------------------
// Playing the steps

const DEFAULT_STEP_TIMEOUT = 30_000;

/** Alertmanager's fingerprint is a hash of the alert's labels: the same labels, the same alert. */
function labelsFingerprint(labels: Record<string, string>): string {
  const sorted = Object.keys(labels)
    .sort()
    .map((k) => `${k}=${labels[k] ?? ''}`);
  return createHash('sha256').update(sorted.join('\n')).digest('hex').slice(0, 16);
}
const DEFAULT_SETTLE = 20_000;

function describeCondition(c: Condition): string {
  if (typeof c === 'string') return c;
  if ('alert' in c)
    return `alert ${c.alert.kind} on ${c.alert.machine}${c.alert.gpu === undefined ? '' : ` GPU ${c.alert.gpu}`} ${c.alert.state}${c.alert.count === undefined ? '' : ` (${c.alert.count})`}`;
  return `threadText /${c.threadText}/`;
}

const isAlertCondition = (c: Condition): boolean => typeof c !== 'string' && 'alert' in c;

async function playStep(rt: ScenarioRuntime, step: Step, index: number): Promise<StepReport> {
  const started = Date.now();
  const user = 'as' in step ? step.as : null;
  const rep: StepReport = {
    index,
    step,
    user,
    userId: user === null ? null : rt.userId(user),
    t: started - rt.t0,
    ms: 0,
    result: {},
    problem: null,
  };
  const timeout = step.timeout ?? DEFAULT_STEP_TIMEOUT;
  const finish = () => {
    rep.ms = Date.now() - started;
    return rep;
  };
  const incidentFor = () => rt.incident(step.incident);

  if (step.after !== undefined) {
    if (typeof step.after === 'number') await sleep(step.after);
    else {
      const inc = incidentFor();
      if (!inc && !isAlertCondition(step.after)) {
        rep.problem = `after ${describeCondition(step.after)}: no incident was opened before this step`;
        return finish();
      }
      if (!(await rt.waitFor(step.after, inc, timeout))) {
        rep.problem = `after ${describeCondition(step.after)}: not reached within ${timeout} ms (step not played)`;
        return finish();
      }
    }
  }

  if ('command' in step) {
    const r = await rt.slash(step.as, step.command, {
      label: step.id ?? null,
      ...(step.channel !== undefined ? { channel: step.channel } : {}),
    });
    rep.result = { status: r.status, ackMs: Math.round(r.elapsedMs), ack: r.ackText, incidentId: r.incidentId };
  } else if ('click' in step) {
    const inc = incidentFor();
    const card = inc ? rt.latestCard(inc) : null;
    if (!inc) rep.problem = 'no incident to click in';
    else if (!card) rep.problem = `no approval card in the thread of ${inc.id}`;
    else {
      const r = await rt.click(step.as, step.click, card);
      rep.result = { incidentId: inc.id, ...r };
      if (!r.sent) rep.problem = r.reason;
    }
  } else if ('wait' in step) {
    await sleep(step.wait);
    rep.result = { waitedMs: step.wait };
  } else if ('clickAlert' in step) {
    const r = await rt.clickAlert(step.as, step.clickAlert, { label: step.id ?? null, timeoutMs: timeout });
    rep.result = r.result;
    if (!r.sent || r.reason !== null) rep.problem = r.reason;
  } else if ('restart' in step) {
    const result: Record<string, unknown> = { restarted: step.restart };
    // Both: the worker crashes first (SIGKILL), then the bot goes down and comes back.
    if (step.restart !== 'bot') Object.assign(result, await rt.stack.restartWorkers());
    if (step.restart !== 'worker') await rt.stack.restartBot();
    rep.result = result;
  } else if ('down' in step) {
    const result: Record<string, unknown> = { down: step.down };
    if (step.down !== 'bot') Object.assign(result, await rt.stack.stopWorkers());
    if (step.down !== 'worker') await rt.stack.stopBot();
    rep.result = result;
  } else if ('up' in step) {
    const result: Record<string, unknown> = { up: step.up };
    if (step.up !== 'bot') Object.assign(result, await rt.stack.startWorkers());
    if (step.up !== 'worker') await rt.stack.startBot();
    rep.result = result;
  } else if ('waitFor' in step) {
    const inc = incidentFor();
    if (!inc && !isAlertCondition(step.waitFor))
      rep.problem = `waitFor ${describeCondition(step.waitFor)}: no incident was opened before this step`;
    else {
      const ok = await rt.waitFor(step.waitFor, inc, timeout);
      rep.result = { incidentId: isAlertCondition(step.waitFor) ? null : (inc?.id ?? null), reached: ok };
      if (!ok) rep.problem = `waitFor ${describeCondition(step.waitFor)}: not reached within ${timeout} ms`;
    }
  } else if ('alertmanager' in step) {
    const r = await rt.alertmanager(step.alertmanager.alerts);
    rep.result = { status: r.status, body: r.body.slice(0, 500) };
    if (r.status !== 200) rep.problem = `alertmanager: the bot answered ${r.status}: ${r.body.slice(0, 200)}`;
  } else if ('process' in step) {
    try {
      rep.result = await rt.applyProcessChange(step.process);
    } catch (e) {
      rep.problem = `process step: ${e instanceof Error ? e.message : String(e)}`;
    }
  } else {
    await rt.applyChange(step.fleet);
    rep.result = { applied: step.fleet };
  }
  return finish();
}

/** Waits until every incident has finished and its thread is rendered; returns the ones that did not. */
async function settle(rt: ScenarioRuntime, timeoutMs: number): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pending: string[] = [];
    for (const id of await rt.allIncidentIds()) {
      const meta = await rt.log.meta(id);
      // An alert stays open as long as its condition does: it is settled once rendered.
      const over = meta?.kind === 'alert' || completedAt(meta, await rt.events(id)) !== null;
      if (!over || !(await rt.rendered(id))) pending.push(id);
    }
    if (pending.length === 0 || Date.now() > deadline) return pending;
    await sleep(100);
  }
}

function checkExpectations(s: Scenario, r: Omit<Report, 'expectations'>): ExpectationResult[] {
  const e = s.expect;
  const out: ExpectationResult[] = [];
  if (!e) return out;
  const got = (name: string) => r.signals.filter((x) => x.process === name);
  for (const n of e.signalled ?? []) {
    const g = got(n);
    out.push({
      check: `signalled ${n}`,
      ok: g.length > 0,
      detail: g.length > 0 ? g.map((x) => x.signal).join(', ') : 'never signalled',
    });
  }
  for (const n of e.notSignalled ?? []) {
    const g = got(n);
    out.push({
      check: `not signalled ${n}`,
      ok: g.length === 0,
      detail: g.length === 0 ? 'never signalled' : `got ${g.map((x) => `${x.signal} (${x.by})`).join(', ')}`,
    });
  }
  for (const [host, want] of Object.entries(e.gpuMemoryMiB ?? {})) {
    const have = r.gpuMemory[host] ?? [];
    const ok = want.every((w, i) => w === null || have[i]?.usedMiB === w) && have.length >= want.length;
    out.push({
      check: `gpu memory ${host}`,
      ok,
      detail: `want [${want.join(', ')}], have [${have.map((g) => g.usedMiB).join(', ')}]`,
    });
  }
  const texts = r.incidents.flatMap((i) => i.thread.map((m) => visibleText(m)));
  for (const p of e.threadText ?? []) {
    const re = toRegExp(p);
    out.push({
      check: `thread text /${p}/`,
      ok: texts.some((t) => re.test(t)),
      detail: texts.some((t) => re.test(t)) ? 'found' : 'no message matches',
    });
  }
  for (const p of e.notThreadText ?? []) {
    const re = toRegExp(p);
    const hit = texts.find((t) => re.test(t));
    out.push({
      check: `no thread text /${p}/`,
      ok: hit === undefined,
      detail: hit === undefined ? 'absent' : `found in: ${hit.slice(0, 200)}`,
    });
  }
  for (const [m, p] of Object.entries(e.noCommand ?? {})) {
    const re = toRegExp(p);
    const hit = (r.commands[m] ?? []).find((c) => c.t >= 0 && re.test(c.cmd));
    out.push({
      check: `no command /${p}/ on ${m}`,
      ok: hit === undefined,
      detail: hit === undefined ? 'none ran' : `ran: ${hit.cmd}`,
    });
  }
  for (const [user, pats] of Object.entries(e.answers ?? {})) {
    const mine = r.answers.filter((a) => a.user === user).map((a) => a.text);
    for (const p of pats) {
      const re = toRegExp(p);
      const ok = mine.some((t) => re.test(t));
      out.push({
        check: `${user} was answered /${p}/`,
        ok,
        detail: ok ? 'found' : `${user} saw: ${mine.map((t) => t.slice(0, 120)).join(' | ') || 'nothing'}`,
      });
    }
  }
  for (const [n, want] of Object.entries(e.signalCounts ?? {}))
    for (const [sig, count] of Object.entries(want)) {
      const have = got(n).filter((x) => x.signal === sig).length;
      out.push({ check: `${n} got ${sig} ${count} time(s)`, ok: have === count, detail: `got it ${have} time(s)` });
    }
  if (e.eachSignalAtMostOnce === true) {
    const seen = new Map<string, number>();
    for (const x of r.signals)
      seen.set(
        `${x.process ?? `${x.machine}:${x.hostPid}`} ${x.signal}`,
        (seen.get(`${x.process ?? `${x.machine}:${x.hostPid}`} ${x.signal}`) ?? 0) + 1,
      );
    const twice = [...seen].filter(([, c]) => c > 1).map(([k, c]) => `${k} ×${c}`);
    out.push({
      check: 'each process got each signal at most once',
      ok: twice.length === 0,
      detail: twice.length === 0 ? 'yes' : twice.join(', '),
    });
  }
  for (const [n, want] of Object.entries(e.signalFrom ?? {}))
    for (const [sig, side] of Object.entries(want)) {
      const sides = got(n)
        .filter((x) => x.signal === sig)
        .map((x) => signalSide(x, r.incidents));
      out.push({
        check: `${n} got ${sig} from the ${side}`,
        ok: sides.length > 0 && sides.every((x) => x === side),
        detail: sides.length === 0 ? `never got ${sig}` : `from: ${sides.join(', ')}`,
      });
    }
  if (e.noHostKillBeforeApproval === true) {
    const early: string[] = [];
    for (const inc of r.incidents) {
      let approved = false;
      for (const ev of inc.events) {
        if (ev.type === 'approval_decided' && ev.decision === 'approved') approved = true;
        if (ev.type === 'command' && ev.on === 'host' && (ev.role === 'kill' || ev.role === 'term') && !approved)
          early.push(`${inc.id} at ${ev.at}`);
      }
    }
    out.push({
      check: 'no host-side signal before an approval',
      ok: early.length === 0,
      detail: early.length === 0 ? 'none' : early.join(', '),
    });
  }
  if (e.allFinished === true) {
    // Alerts do not finish (they clear): the incidents people opened do.
    const opened = r.incidents.filter((i) => i.kind !== 'alert');
    const open = opened.filter((i) => !i.finished).map((i) => i.id);
    out.push({
      check: 'every incident finished',
      ok: opened.length > 0 && open.length === 0,
      detail:
        opened.length === 0
          ? 'no incident was opened'
          : open.length === 0
            ? `${opened.length} finished`
            : `open: ${open.join(', ')}`,
    });
  }
  if (e.alerts !== undefined) out.push(...checkAlerts(e.alerts, r));
  return out;
}

type AlertExpectation = NonNullable<NonNullable<Scenario['expect']>['alerts']>[number];

/**
 * The alerts channel against the story: every episode is one top-level message raised once (no
 * repeat, none lost), no two episodes of one alert overlap, no message there that no incident
 * claims; then each expected alert's counts and text.
 */
export function checkAlerts(
  want: readonly AlertExpectation[],
  r: Pick<Report, 'alerts' | 'alertsChannel'>,
): ExpectationResult[] {
  const out: ExpectationResult[] = [];
  const name = (a: { kind: string | null; machine: string | null; gpu?: number | null | undefined }) =>
    `${a.kind ?? '?'} on ${a.machine ?? '?'}${a.gpu === undefined || a.gpu === null ? '' : ` GPU ${a.gpu}`}`;
  // An episode may have several members (the watchdog's alert and Alertmanager's for one condition,
  // docs/alertmanager.md): "raised once" is once per member, all in the one message.
  const members = (a: AlertReport) =>
    new Set(
      a.events.filter((e) => e.type === 'alert_raised').map((e) => (isRecord(e.alert) ? String(e.alert.key) : '?')),
    ).size;
  const bad = r.alerts
    .filter((a) => a.raised === 0 || a.raised !== members(a) || a.messages.length !== 1)
    .map(
      (a) => `${a.id} (${name(a)}): raised ${a.raised}× by ${members(a)} source(s), ${a.messages.length} message(s)`,
    );
  out.push({
    check: 'each alert episode is one message, raised once',
    ok: bad.length === 0,
    detail: bad.length === 0 ? `${r.alerts.length} episode(s)` : bad.join('; '),
  });
  const overlaps: string[] = [];
  const byKey = new Map<string, AlertReport[]>();
  for (const a of r.alerts) byKey.set(a.key, [...(byKey.get(a.key) ?? []), a]);
  for (const [key, eps] of byKey)
    for (let i = 1; i < eps.length; i++) {
      const prev = eps[i - 1];
      const cur = eps[i];
      if (!prev || !cur) continue;
      const clearedAt = prev.events.find((e) => e.type === 'alert_cleared')?.at;
      const raisedAt = cur.events.find((e) => e.type === 'alert_raised')?.at;
      if (clearedAt === undefined || (raisedAt !== undefined && raisedAt < clearedAt))
        overlaps.push(`${key}: ${cur.id} raised while ${prev.id} was open`);
    }
  out.push({
    check: 'no alert raised again while it was open',
    ok: overlaps.length === 0,
    detail: overlaps.length === 0 ? 'none' : overlaps.join('; '),
  });
  const stray = r.alertsChannel.unclaimed;
  out.push({
    check: 'no message in the alerts channel that no incident claims',
    ok: stray.length === 0,
    detail: stray.length === 0 ? 'none' : stray.map((m) => `${m.ts}: ${m.text.slice(0, 120)}`).join(' | '),
  });
  for (const w of want) {
    const eps = r.alerts.filter(
      (a) => a.kind === w.kind && a.machine === w.machine && (w.gpu === undefined || a.gpu === w.gpu),
    );
    const latest = eps[eps.length - 1];
    const label = name({ kind: w.kind, machine: w.machine, gpu: w.gpu });
    const msgs = eps.flatMap((a) => a.messages);
    const push = (what: string, ok: boolean, detail: string) =>
      out.push({ check: `alert ${label}: ${what}`, ok, detail });
    if (w.messages !== undefined)
      push(
        `${w.messages} message(s)`,
        msgs.length === w.messages,
        `${msgs.length} message(s) in ${eps.length} episode(s)`,
      );
    if (w.raised !== undefined) {
      const n = eps.reduce((a, e) => a + e.raised, 0);
      push(`raised ${w.raised} time(s)`, n === w.raised, `raised ${n} time(s)`);
    }
    if (w.updated !== undefined) {
      const n = eps.reduce((a, e) => a + e.updated, 0);
      push(`updated ${w.updated} time(s)`, n === w.updated, `updated ${n} time(s)`);
    }
    if (w.cleared !== undefined)
      push(
        w.cleared ? 'cleared' : 'still open',
        latest !== undefined && latest.cleared === w.cleared,
        latest === undefined ? 'never raised' : latest.cleared ? 'cleared' : 'open',
      );
    if (w.snoozed !== undefined)
      push(
        w.snoozed ? 'snoozed' : 'not snoozed',
        latest !== undefined && latest.snoozed > 0 === w.snoozed,
        latest === undefined ? 'never raised' : `${latest.snoozed} snooze(s)`,
      );
    if (w.minEdits !== undefined) {
      const edits = latest?.messages[0]?.edits ?? 0;
      push(
        `edited in place ${w.minEdits}+ time(s)`,
        latest !== undefined && edits >= w.minEdits,
        latest === undefined ? 'never raised' : `${edits} chat.update(s) of ${latest.messages[0]?.ts ?? 'no message'}`,
      );
    }
    for (const p of w.text ?? []) {
      const re = toRegExp(p);
      const ok = msgs.some((m) => re.test(m.text));
      push(
        `text /${p}/`,
        ok,
        ok
          ? 'found'
          : msgs.length === 0
            ? 'no message'
            : `it says: ${msgs.map((m) => m.text.slice(0, 200)).join(' | ')}`,
      );
    }
    for (const p of w.notText ?? []) {
      const re = toRegExp(p);
      const hit = msgs.find((m) => re.test(m.text));
      push(`no text /${p}/`, hit === undefined, hit === undefined ? 'absent' : `found in: ${hit.text.slice(0, 200)}`);
    }
  }
  return out;
}

/**
 * Which side sent a signal: a catchable one says it itself (sender PID 0 = outside the receiver's
 * namespace, the host); a SIGKILL cannot, so the incident log's host-side SIGKILL of that host PID
 * decides (none: the container's).
 */
function signalSide(x: SignalReport, incidents: readonly IncidentReport[]): 'container' | 'host' {
  if (x.byPid !== null) return x.byPid === 0 ? 'host' : 'container';
  const hostKill = incidents.some((i) => {
    const hostSteps = new Set(
      i.events.filter((ev) => ev.type === 'step_started' && ev.kind === 'host_kill').map((ev) => ev.stepId),
    );
    return i.events.some(
      (ev) =>
        ev.type === 'signalled' &&
        ev.hostPid === x.hostPid &&
        ev.signal === 'KILL' &&
        ev.result === 'sent' &&
        hostSteps.has(ev.stepId),
    );
  });
  return hostKill ? 'host' : 'container';
}

/** Runs a scenario (a file path or a parsed scenario) end to end and returns the report. Always stops what it started. */
export async function runScenario(input: string | Scenario, opts: RunOptions = {}): Promise<Report> {
  const say = opts.log ?? (() => undefined);
  const startedAt = new Date();
  const file = typeof input === 'string' ? input : null;
  const empty = (name: string, broken: Report['broken']): Report => ({
    scenario: { name, file, description: null, pending: null },
    startedAt: startedAt.toISOString(),
    startupMs: 0,
    runMs: 0,
    broken,
    where: { fleetDir: null, redisPrefix: null },
    users: {},
    approvers: [],
    steps: [],
    slack: { calls: [] },
    commands: {},
    signals: [],
    gpuMemory: {},
    processes: {},
    incidents: [],
    alerts: [],
    alertsChannel: { channel: null, unclaimed: [] },
    answers: [],
    unfinished: [],
    errorLogs: [],
    expectations: [],
  });
  let scenario: Scenario;
  try {
    scenario = typeof input === 'string' ? loadScenario(input) : input;
  } catch (e) {
    return empty(file ?? '?', { stage: 'load', message: e instanceof Error ? e.message : String(e) });
  }
  const head = {
    name: scenario.name,
    file,
    description: scenario.description ?? null,
    pending: scenario.pending ?? null,
  };
  say(`scenario ${scenario.name}: starting fleet and stack`);
  let rt: ScenarioRuntime;
  try {
    rt = await ScenarioRuntime.start(scenario);
  } catch (e) {
    return {
      ...empty(scenario.name, { stage: 'start', message: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
      scenario: head,
    };
  }
  const startupMs = Date.now() - startedAt.getTime();
  say(`started in ${startupMs} ms`);
  rt.t0 = Date.now();
  const steps: StepReport[] = [];
  let broken: Report['broken'] = null;
  let unfinished: string[] = [];
  try {
    try {
      for (const [i, step] of scenario.steps.entries()) {
        const r = await playStep(rt, step, i);
        steps.push(r);
        say(`step ${i}: ${JSON.stringify(step)} (${r.ms} ms)${r.problem ? `: ${r.problem}` : ''}`);
      }
      unfinished = await settle(rt, scenario.settings.settle ?? DEFAULT_SETTLE);
    } catch (e) {
      broken = { stage: 'steps', message: e instanceof Error ? (e.stack ?? e.message) : String(e) };
    }
    const runMs = Date.now() - rt.t0;
    let collected: Awaited<ReturnType<ScenarioRuntime['collect']>> | null = null;
    try {
      collected = await rt.collect();
    } catch (e) {
      broken ??= { stage: 'collect', message: e instanceof Error ? (e.stack ?? e.message) : String(e) };
    }
    const base = {
      ...empty(scenario.name, broken),
      ...(collected ?? {}),
      scenario: head,
      startupMs,
      runMs,
      steps,
      unfinished,
    };
    return { ...base, expectations: checkExpectations(scenario, base) };
  } finally {
    await rt.stop();
    say('stopped');
  }
}
