/**
 * The scenario file format (YAML), as a zod schema. See README.md in this folder for the prose
 * version. A scenario is data: the fleet to build, who the Slack users are, and the steps to
 * play. Nothing in it is code, so a new incident is one new YAML file.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import type { ConditionKind } from '../../src/watchdog/judge.ts';

const machineId = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'must be a machine id like kpro5 or ct129');
const userName = z.string().regex(/^[a-z][a-z0-9_-]{0,30}$/, 'must be a lower-case user name like alice');
const slackUserId = z.string().regex(/^[UW][A-Z0-9]{2,}$/, 'must be a Slack user ID like U0ALICE001');
const label = z.string().regex(/^[A-Za-z0-9_-]{1,40}$/, 'must be a short label (letters, digits, _ or -)');

/** A regex as written in a scenario; a leading `(?i)` makes it case-insensitive (JS has no inline flags). */
export function toRegExp(p: string): RegExp {
  return p.startsWith('(?i)') ? new RegExp(p.slice(4), 'i') : new RegExp(p);
}

const regex = z
  .string()
  .min(1)
  .refine(
    (p) => {
      try {
        toRegExp(p);
        return true;
      } catch {
        return false;
      }
    },
    { message: 'must be a valid regular expression (JavaScript syntax; a leading (?i) ignores case)' },
  );

/** `500ms`, `2s`, `1.5s`, `1m`, or a plain number of milliseconds. Parsed to milliseconds. */
const Duration = z.union([
  z.number().nonnegative(),
  z
    .string()
    .regex(/^\d+(\.\d+)?(ms|s|m)$/, 'must be a duration like 500ms, 2s or 1m')
    .transform((s) => {
      const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(s);
      const n = Number(m?.[1] ?? '0');
      const unit = m?.[2] ?? 'ms';
      return Math.round(unit === 'ms' ? n : unit === 's' ? n * 1000 : n * 60_000);
    }),
]);

const GpuSpec = z
  .object({
    name: z.string().optional(),
    memoryTotalMiB: z.number().int().positive().optional(),
    busId: z.string().optional(),
    uuid: z.string().optional(),
    persistence: z.boolean().optional(),
  })
  .strict();

const Host = z
  .object({
    id: machineId,
    site: machineId.optional(),
    /** A count of default GPUs (H200, 143,771 MiB) or a list. */
    gpus: z.union([z.number().int().min(0).max(16), z.array(GpuSpec).max(16)]),
    ram: z.object({ totalGiB: z.number().positive(), usedGiB: z.number().nonnegative() }).strict().optional(),
  })
  .strict();

const Container = z
  .object({
    id: machineId,
    vmid: z.number().int().min(100),
    host: machineId,
    /** Own sshd inside the container; otherwise the bot reaches it with `pct exec` on its host. */
    ownAddress: z.boolean().default(false),
    /** The Unix user the bot logs in as (only with ownAddress). A non-root user cannot kill root's processes. */
    sshUser: z
      .string()
      .regex(/^[a-z_][a-z0-9_-]{0,31}$/)
      .optional(),
    /**
     * Host GPU indices passed to it (`pct config`: `devN: /dev/nvidiaM`); it sees them renumbered
     * from 0 in bus order, and its holders name GPUs in its own numbering. Default: all, same numbers.
     */
    gpus: z.array(z.number().int().min(0).max(15)).min(1).max(16).optional(),
    /** Its PID 1 is a GPU holder (an application as the container's init), named for expectations. */
    init: z.lazy(() => InitHolder).optional(),
    /** A privileged container (Proxmox `unprivileged: 0`); default unprivileged, as Proxmox creates them. Real LXC only. */
    privileged: z.boolean().optional(),
  })
  .strict();

/** `{index: 0, mib: 48000}` or the short form `"0:48000"`. */
const GpuAlloc = z.union([
  z.object({ index: z.number().int().min(0), mib: z.number().int().positive() }).strict(),
  z
    .string()
    .regex(/^\d+:\d+$/, 'must be "<gpu index>:<MiB>", e.g. "0:48000"')
    .transform((s) => {
      const [i, m] = s.split(':');
      return { index: Number(i), mib: Number(m) };
    }),
]);

const ProcessCommon = {
  /** Name used in the report (`signals[].process`) and in expectations. */
  name: label,
  machine: machineId,
  /** Command line shown by ps (argv split on spaces; a real launch line with its arguments is long). */
  title: z.string().min(1).max(1000).optional(),
  ignoreTerm: z.boolean().optional(),
  /** Run as this user (created when missing). */
  user: z
    .string()
    .regex(/^[a-z_][a-z0-9_-]{0,31}$/)
    .optional(),
};

const Holder = z
  .object({
    ...ProcessCommon,
    gpus: z.array(GpuAlloc).min(1),
    /** Stuck while holding (the watchdog's holder_stuck): `Z` a real zombie, `D` real uninterruptible sleep; `process: { release }` lets it go. */
    stuck: z.enum(['Z', 'D'], { message: 'must be Z (zombie) or D (uninterruptible sleep)' }).optional(),
    /** Memory stays in use this long after the process dies (driver teardown). */
    dieDelay: Duration.optional(),
    /** Started under a parent with this command line (a launcher above its TP ranks); the parent holds nothing. */
    parent: z.string().min(1).max(1000).optional(),
  })
  .strict();

const Bystander = z.object({ ...ProcessCommon, title: z.string().min(1).max(1000) }).strict();

const InitHolder = z
  .object({ name: label, title: z.string().min(1).max(200).optional(), gpus: z.array(GpuAlloc).min(1) })
  .strict();

const Leak = z.object({ host: machineId, gpu: z.number().int().min(0), mib: z.number().int().positive() }).strict();

/** One change to a machine: used in `fleet.faults` (before the first step) and in `fleet:` steps. */
export const MachineChange = z
  .object({
    machine: machineId,
    /** nvidia-smi hangs (true) or answers again (false). */
    hang: z.boolean().optional(),
    /** Host RAM (hosts only). */
    ram: z.object({ totalGiB: z.number().positive(), usedGiB: z.number().nonnegative() }).strict().optional(),
    /** `gpu_lost` on one GPU, `nvml_version_mismatch` for the driver, null to clear. */
    gpuError: z
      .object({
        kind: z.enum(['gpu_lost', 'nvml_version_mismatch']).nullable(),
        gpu: z.number().int().min(0).optional(),
      })
      .strict()
      .optional(),
    /** Memory held with no process (hosts only). */
    leak: z
      .object({ gpu: z.number().int().min(0), mib: z.number().int().min(0) })
      .strict()
      .optional(),
    /** The machine's sshd restarts with a new host key; the bot keeps the old pin. */
    replaceHostKey: z.literal(true).optional(),
    /** A host becomes unreachable; a container stops. */
    stop: z.literal(true).optional(),
    /** A stopped machine starts again (a container: new init, new PID namespace). */
    start: z.literal(true).optional(),
    /** A container stops and starts again: a new PID namespace, its processes gone. */
    restart: z.literal(true).optional(),
    /** An NVIDIA Xid for one of the host's GPUs in its kernel log, as the driver prints it (hosts only). */
    xid: z
      .object({
        gpu: z.number().int().min(0),
        xid: z.number().int().min(1).max(999),
        detail: z.string().min(1).max(200).optional(),
      })
      .strict()
      .optional(),
    /** A line in the host's kernel log, as is (hosts only). */
    kernelLog: z.string().min(1).max(500).optional(),
    /** One GPU's `gpu_recovery_action` (`GPU Reset`, `Node Reboot`, ...; null: None), hosts only. */
    recoveryAction: z
      .object({ gpu: z.number().int().min(0), action: z.string().min(1).max(40).nullable() })
      .strict()
      .optional(),
    /** true: one GPU fell off the bus and no longer enumerates (fewer GPUs than seen; fleet setGpuGone); false: it is back (hosts only). */
    gpuGone: z
      .object({ gpu: z.number().int().min(0), gone: z.boolean() })
      .strict()
      .optional(),
  })
  .strict()
  .refine((c) => Object.keys(c).length > 1, {
    message:
      'say what changes (hang, ram, gpuError, leak, replaceHostKey, stop, start, restart, xid, kernelLog, recoveryAction or gpuGone)',
  });

/**
 * One change to a process, mid-run: `end` SIGKILLs a named process from outside (as if it died on
 * its own) and waits until its PID is free; `start` starts a new named process (a holder when it
 * has gpus), optionally on the very PIDs (host and container) of an earlier named process.
 */
export const ProcessChange = z.union([
  z.object({ end: label }).strict(),
  /** A stuck holder (`stuck: Z | D`) is let go as the kernel would, without a signal: a zombie is reaped, a D sleeper wakes. */
  z.object({ release: label }).strict(),
  z
    .object({
      start: z
        .object({
          ...ProcessCommon,
          gpus: z.array(GpuAlloc).min(1).optional(),
          /** Take this earlier process's host PID and container PID (it must have ended). */
          takePidOf: label.optional(),
        })
        .strict(),
    })
    .strict(),
]);
export type ProcessChange = z.output<typeof ProcessChange>;

/** The watchdog's alert kinds (src/watchdog/judge.ts `ConditionKind`; the compiler keeps the two equal). */
const ALERT_KINDS = [
  'ghost_memory',
  'holder_stuck',
  'ram_high',
  'nvidia_smi_failing',
  'gpu_error',
  'gpus_missing',
  'unreachable',
  'xid',
  'recovery_action',
] as const;
type SameKinds = [
  Exclude<ConditionKind, (typeof ALERT_KINDS)[number]>,
  Exclude<(typeof ALERT_KINDS)[number], ConditionKind>,
] extends [never, never]
  ? true
  : false;
const sameKinds: SameKinds = true;
void sameKinds;
const alertKind = z.enum(ALERT_KINDS, { message: `must be an alert kind: ${ALERT_KINDS.join(', ')}` });
const gpuIndex = z.number().int().min(0).max(15);

/**
 * An alert's state, always about the LATEST episode of that kind on that machine (and GPU), and
 * only once the bot has rendered it: `raised` (open; with `count`, at least that many episodes were
 * raised), `updated` / `snoozed` (at least `count` such events, default 1), `cleared`.
 */
export const AlertCondition = z
  .object({
    kind: alertKind,
    machine: machineId,
    gpu: gpuIndex.optional(),
    state: z.enum(['raised', 'updated', 'cleared', 'snoozed'], {
      message: 'must be raised, updated, cleared or snoozed',
    }),
    count: z.number().int().min(1).max(100).optional(),
  })
  .strict();
export type AlertCondition = z.output<typeof AlertCondition>;

/** What a step can wait for: in an incident's thread, or an alert's state. */
export const Condition = z.union([
  z.enum(['thread-done', 'card-posted', 'card-decided', 'card-expired', 'verdict']),
  z.object({ threadText: regex }).strict(),
  z.object({ alert: AlertCondition }).strict(),
]);
export type Condition = z.output<typeof Condition>;

const StepCommon = {
  /** Wait before this step: a duration (`2s`) or a condition (`card-posted`) on the step's incident. */
  after: z.union([Duration, Condition]).optional(),
  /** Which incident `after`/`waitFor`/`click` refer to: the `id` of an earlier command step. Default: the latest. */
  incident: label.optional(),
  /** How long a condition may take before the step is recorded as timed out. Default 30s. */
  timeout: Duration.optional(),
};

const CommandStep = z
  .object({
    ...StepCommon,
    /** A user name from `users`. */
    as: userName,
    /** What the user types: `/gpu status kpro5` (the `/gpu` is optional). */
    command: z.string().min(1).max(600),
    /** Label for the incident this command opens, for later steps. */
    id: label.optional(),
    channel: z
      .string()
      .regex(/^[CGD][A-Z0-9]{2,}$/)
      .optional(),
  })
  .strict();

const ClickStep = z
  .object({
    ...StepCommon,
    as: userName,
    /** Which button of the latest approval card in the incident's thread. */
    click: z.enum(['approve', 'deny']),
  })
  .strict();

/**
 * A click on a button of an alert's message (the latest episode of that kind on that machine, or
 * on that GPU): Status, Unstick (on a host's alert: `container` picks the container in its select),
 * Snooze 1 h / 1 day (with `gpu`: that GPU's snooze, else the machine's).
 */
export const AlertClick = z
  .object({
    kind: alertKind,
    machine: machineId,
    button: z.enum(['status', 'unstick', 'snooze-1h', 'snooze-1d'], {
      message: 'must be status, unstick, snooze-1h or snooze-1d',
    }),
    gpu: gpuIndex.optional(),
    container: machineId.optional(),
  })
  .strict();
export type AlertClick = z.output<typeof AlertClick>;

const ClickAlertStep = z
  .object({
    ...StepCommon,
    as: userName,
    clickAlert: AlertClick,
    /** Label for the incident the click opens (Status or Unstick), for later steps. */
    id: label.optional(),
  })
  .strict();

/** Stops and starts the bot, the worker or both against the same Redis (the worker as a crash: SIGKILL). */
const RestartStep = z
  .object({ ...StepCommon, restart: z.enum(['bot', 'worker', 'both'], { message: 'must be bot, worker or both' }) })
  .strict();

/** The halves of a restart, for what happens while it is down: `down` stops (the worker: SIGKILL), `up` starts again. */
const procs = z.enum(['bot', 'worker', 'both'], { message: 'must be bot, worker or both' });
const DownStep = z.object({ ...StepCommon, down: procs }).strict();
const UpStep = z.object({ ...StepCommon, up: procs }).strict();

/** One Alertmanager alert as a scenario writes it; the runner fills in the rest of webhook v4. */
const AmAlert = z
  .object({
    status: z.enum(['firing', 'resolved'], { message: 'must be firing or resolved' }).default('firing'),
    /** dcgm-exporter's labels, e.g. `{alertname: DcgmXidError, Hostname: kpro5, gpu: "1", UUID: GPU-...}`. */
    labels: z.record(z.string().min(1).max(100), z.string().max(1000)),
    annotations: z.record(z.string().min(1).max(100), z.string().max(2000)).default({}),
    /** Default: made from the labels, as Alertmanager does (a repeat of the same alert has the same one). */
    fingerprint: z.string().min(1).max(64).optional(),
    generatorURL: z.string().url().optional(),
  })
  .strict();
export type AmAlert = z.output<typeof AmAlert>;

/** An Alertmanager notification (webhook v4) POSTed to the bot's /alertmanager with the token the runner set (needs settings.watch). */
const AlertmanagerStep = z
  .object({ ...StepCommon, alertmanager: z.object({ alerts: z.array(AmAlert).min(1).max(200) }).strict() })
  .strict();

const WaitStep = z.object({ ...StepCommon, wait: Duration }).strict();
const WaitForStep = z.object({ ...StepCommon, waitFor: Condition }).strict();
const FleetStep = z.object({ ...StepCommon, fleet: MachineChange }).strict();
const ProcessStep = z.object({ ...StepCommon, process: ProcessChange }).strict();

export const Step = z.union([
  CommandStep,
  ClickStep,
  ClickAlertStep,
  RestartStep,
  DownStep,
  UpStep,
  WaitStep,
  WaitForStep,
  FleetStep,
  ProcessStep,
  AlertmanagerStep,
]);
export type Step = z.output<typeof Step>;

/**
 * What the alerts channel shows of one alert (kind on machine, or on one GPU), over all its episodes.
 * Whenever `alerts` is given, every alert is also checked to be one message per episode, raised once.
 */
const AlertExpectation = z
  .object({
    kind: alertKind,
    machine: machineId,
    gpu: gpuIndex.optional(),
    /** Top-level messages in the alerts channel for it (one per episode). */
    messages: z.number().int().min(0).optional(),
    /** alert_raised events (episodes). */
    raised: z.number().int().min(0).optional(),
    /** alert_updated events over all episodes (what it says changed; none while snoozed). */
    updated: z.number().int().min(0).optional(),
    /** The latest episode ended (alert_cleared), or is still open. */
    cleared: z.boolean().optional(),
    /** The latest episode was snoozed (an alert_snoozed event). */
    snoozed: z.boolean().optional(),
    /** The latest episode's message was edited in place (chat.update on its ts) at least this often. */
    minEdits: z.number().int().min(0).optional(),
    /** Each regex matches the final text of some episode's message (its text or block text). */
    text: z.array(regex).optional(),
    /** No regex matches any episode's final message. */
    notText: z.array(regex).optional(),
  })
  .strict();

/** Checks the report against the story; a failed check is a finding about the bot, not a broken run. */
const Expect = z
  .object({
    /** Per alert, what its messages in the alerts channel show (needs settings.watch). */
    alerts: z.array(AlertExpectation).optional(),
    /** These named processes received a signal (any). */
    signalled: z.array(label).optional(),
    /** These named processes never received a signal. */
    notSignalled: z.array(label).optional(),
    /** Final used MiB per GPU, per host, e.g. `kpro5: [0, 0, 0]` (`null` = don't check that GPU). */
    gpuMemoryMiB: z.record(machineId, z.array(z.number().int().nullable())).optional(),
    /** Each regex must match some message (its text or any text in its blocks) in some incident thread. */
    threadText: z.array(regex).optional(),
    /** No regex may match any message text in any thread. */
    notThreadText: z.array(regex).optional(),
    /** Per user, regexes that must each match something the bot told that user privately (ack, ephemeral, response_url). */
    answers: z.record(userName, z.array(regex)).optional(),
    /** No command logged on these machines matches the regex, e.g. `{ ct129: "nvidia-smi -r" }`. */
    noCommand: z.record(machineId, regex).optional(),
    /** Every incident finished (has a `finished` event). */
    allFinished: z.boolean().optional(),
    /** Exact number of times a named process received each signal, e.g. `tp0: { SIGTERM: 1, SIGKILL: 0 }`. */
    signalCounts: z.record(label, z.partialRecord(z.enum(['SIGTERM', 'SIGKILL']), z.number().int().min(0))).optional(),
    /** No process received the same signal twice. */
    eachSignalAtMostOnce: z.boolean().optional(),
    /** Which side sent a named process a signal: `container` (from inside its namespace) or `host`. */
    signalFrom: z
      .record(label, z.partialRecord(z.enum(['SIGTERM', 'SIGKILL']), z.enum(['container', 'host'])))
      .optional(),
    /** No host-side signal command ran before a second person approved it, in any incident. */
    noHostKillBeforeApproval: z.boolean().optional(),
  })
  .strict();

export const ScenarioSchema = z
  .object({
    name: z.string().min(1),
    description: z.string().optional(),
    /** The scenario cannot pass yet; tests skip it with this reason (never fake the missing feature). */
    pending: z.string().min(1).optional(),
    /** Slack users by name. A list of names gets IDs made from the names (`alice` → `U0ALICE`). */
    users: z.union([z.record(userName, slackUserId), z.array(userName)]).default({}),
    /** Names from `users` (or raw Slack IDs) allowed to approve host-level steps. */
    approvers: z.array(z.union([userName, slackUserId])).default([]),
    /** Names (or raw IDs) who may also approve once a card escalates (GPU_MEDIC_ESCALATION_APPROVERS; needs settings.escalateAfterSec). */
    escalationApprovers: z.array(z.union([userName, slackUserId])).default([]),
    channel: z
      .string()
      .regex(/^[CGD][A-Z0-9]{2,}$/)
      .default('C0ONCALL01'),
    settings: z
      .object({
        /** Per-command timeout the bot uses on every machine (default 20 s; short values keep fault scenarios quick). */
        commandTimeoutSec: z.number().int().min(1).max(600).optional(),
        connectTimeoutSec: z.number().int().min(1).max(120).optional(),
        /** Approval card lifetime (GPU_MEDIC_APPROVAL_TTL_SEC: the bot accepts 5 s at least). */
        approvalTtlSec: z.number().int().min(5).optional(),
        /** Seconds a pending card waits before the escalation group is pinged and may decide (GPU_MEDIC_ESCALATE_AFTER_SEC). */
        escalateAfterSec: z.number().int().min(1).optional(),
        termGraceSec: z.number().int().min(1).optional(),
        /** Longest wait for GPU memory to come back after signals (GPU_MEDIC_RELEASE_TIMEOUT_SEC). */
        releaseTimeoutSec: z.number().int().min(1).optional(),
        /** How often the worker re-reads processes and memory while it waits (GPU_MEDIC_POLL_MS). */
        pollMs: z.number().int().min(100).max(60_000).optional(),
        /** After the last step, how long to wait for every incident to finish and render. Default 20s. */
        settle: Duration.optional(),
        /**
         * Turns the watchdog on (GPU_MEDIC_ALERTS_CHANNEL = `channel`): a round every `intervalSec`
         * (GPU_MEDIC_WATCH_INTERVAL_SEC, 2 s at least), ghost memory raised after `ghostSec`
         * (GPU_MEDIC_WATCH_GHOST_SEC), host RAM from `ramPct` % (GPU_MEDIC_WATCH_RAM_PCT).
         */
        watch: z
          .object({
            intervalSec: z
              .number()
              .int()
              .min(2, 'must be 2 or more (GPU_MEDIC_WATCH_INTERVAL_SEC accepts 2 s and up)')
              .max(86_400)
              .default(2),
            ghostSec: z.number().int().min(0).max(86_400).optional(),
            ramPct: z.number().int().min(1).max(100).optional(),
            channel: z
              .string()
              .regex(/^[CG][A-Z0-9]{2,}$/, 'must be a channel ID like C0ALERTS01')
              .default('C0ALERTS01'),
          })
          .strict()
          .optional(),
      })
      .strict()
      .default({}),
    fleet: z
      .object({
        hosts: z.array(Host).min(1),
        containers: z.array(Container).default([]),
        holders: z.array(Holder).default([]),
        bystanders: z.array(Bystander).default([]),
        leaks: z.array(Leak).default([]),
        /** Changes applied after the processes start and before the first step. */
        faults: z.array(MachineChange).default([]),
      })
      .strict(),
    steps: z.array(Step).min(1),
    expect: Expect.optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
    const users = Array.isArray(s.users) ? s.users : Object.keys(s.users);
    const machines = new Set([...s.fleet.hosts.map((h) => h.id), ...s.fleet.containers.map((c) => c.id)]);
    const hosts = new Set(s.fleet.hosts.map((h) => h.id));
    const names = new Set<string>();
    const bad = (path: (string | number)[], message: string) => ctx.addIssue({ code: 'custom', path, message });
    (['approvers', 'escalationApprovers'] as const).forEach((list) =>
      s[list].forEach((a, i) => {
        if (!a.startsWith('U') && !a.startsWith('W') && !users.includes(a))
          bad([list, i], `unknown user "${a}" (add it to users)`);
      }),
    );
    (['holders', 'bystanders'] as const).forEach((kind) =>
      s.fleet[kind].forEach((p, i) => {
        if (!machines.has(p.machine)) bad(['fleet', kind, i, 'machine'], `unknown machine "${p.machine}"`);
        if (names.has(p.name)) bad(['fleet', kind, i, 'name'], `duplicate process name "${p.name}"`);
        names.add(p.name);
      }),
    );
    s.fleet.containers.forEach((c, i) => {
      if (c.init !== undefined) {
        if (names.has(c.init.name))
          bad(['fleet', 'containers', i, 'init', 'name'], `duplicate process name "${c.init.name}"`);
        names.add(c.init.name);
      }
      if (!hosts.has(c.host)) bad(['fleet', 'containers', i, 'host'], `unknown host "${c.host}"`);
      if (c.sshUser !== undefined && !c.ownAddress)
        bad(['fleet', 'containers', i, 'sshUser'], 'sshUser needs ownAddress: true');
    });
    s.fleet.leaks.forEach((l, i) => {
      if (!hosts.has(l.host)) bad(['fleet', 'leaks', i, 'host'], `unknown host "${l.host}"`);
    });
    const hostOnly = (path: (string | number)[], c: MachineChange) => {
      for (const k of ['xid', 'kernelLog', 'recoveryAction', 'gpuGone'] as const)
        if (c[k] !== undefined && machines.has(c.machine) && !hosts.has(c.machine))
          bad([...path, k], `${k} is a host's (${c.machine} is a container)`);
    };
    s.fleet.faults.forEach((f, i) => {
      if (!machines.has(f.machine)) bad(['fleet', 'faults', i, 'machine'], `unknown machine "${f.machine}"`);
      hostOnly(['fleet', 'faults', i], f);
    });
    const ids = new Set<string>();
    const watchOff = s.settings.watch === undefined;
    const needsWatch = (path: (string | number)[], what: string) => {
      if (watchOff) bad(path, `${what} needs settings.watch (the watchdog is off without it)`);
    };
    const containerHost = new Map(s.fleet.containers.map((c) => [c.id, c.host]));
    const checkAlertTarget = (path: (string | number)[], a: { machine: string }, what: string) => {
      needsWatch(path, what);
      if (!machines.has(a.machine)) bad([...path, 'machine'], `unknown machine "${a.machine}"`);
    };
    const conditionOf = (st: Step): Array<[string, Condition]> => [
      ...(st.after !== undefined && typeof st.after !== 'number' ? [['after', st.after] as [string, Condition]] : []),
      ...('waitFor' in st ? [['waitFor', st.waitFor] as [string, Condition]] : []),
    ];
    // What is down before each step: nobody can type or click at a stopped bot, and all comes back up.
    const down = new Set<string>();
    const partsOf = (p: 'bot' | 'worker' | 'both') => (p === 'both' ? ['bot', 'worker'] : [p]);
    s.steps.forEach((st, i) => {
      if ('down' in st)
        for (const p of partsOf(st.down)) {
          if (down.has(p)) bad(['steps', i, 'down'], `the ${p} is already down`);
          down.add(p);
        }
      if ('up' in st)
        for (const p of partsOf(st.up)) {
          if (!down.has(p)) bad(['steps', i, 'up'], `the ${p} is not down (a down: step must come first)`);
          down.delete(p);
        }
      if (('as' in st || 'restart' in st || 'alertmanager' in st) && down.size > 0)
        bad(
          ['steps', i],
          `the ${[...down].join(' and ')} ${down.size > 1 ? 'are' : 'is'} down here: bring ${down.size > 1 ? 'them' : 'it'} up first`,
        );
    });
    if (down.size > 0)
      bad(
        ['steps'],
        `the ${[...down].join(' and ')} ${down.size > 1 ? 'stay' : 'stays'} down at the end: add an up: step`,
      );
    s.steps.forEach((st, i) => {
      for (const [where, c] of conditionOf(st))
        if (typeof c !== 'string' && 'alert' in c)
          checkAlertTarget(['steps', i, where, 'alert'], c.alert, 'an alert condition');
      if ('alertmanager' in st) needsWatch(['steps', i, 'alertmanager'], 'an alertmanager step');
      if ('clickAlert' in st) {
        const c = st.clickAlert;
        checkAlertTarget(['steps', i, 'clickAlert'], c, 'clickAlert');
        if (c.container !== undefined) {
          if (c.button !== 'unstick')
            bad(
              ['steps', i, 'clickAlert', 'container'],
              'container picks the container of an Unstick click only (button: unstick)',
            );
          else if (!containerHost.has(c.container))
            bad(['steps', i, 'clickAlert', 'container'], `unknown container "${c.container}"`);
          else if (containerHost.get(c.container) !== c.machine)
            bad(
              ['steps', i, 'clickAlert', 'container'],
              `container "${c.container}" is not on ${c.machine} (its host is ${String(containerHost.get(c.container))})`,
            );
        }
        if (st.id !== undefined) {
          if (ids.has(st.id)) bad(['steps', i, 'id'], `duplicate id "${st.id}"`);
          ids.add(st.id);
        }
      }
      if ('as' in st && !users.includes(st.as)) bad(['steps', i, 'as'], `unknown user "${st.as}" (add it to users)`);
      if (st.incident !== undefined && !ids.has(st.incident))
        bad(['steps', i, 'incident'], `no earlier command step has id "${st.incident}"`);
      if ('command' in st && st.id !== undefined) {
        if (ids.has(st.id)) bad(['steps', i, 'id'], `duplicate id "${st.id}"`);
        ids.add(st.id);
      }
      if ('fleet' in st && !machines.has(st.fleet.machine))
        bad(['steps', i, 'fleet', 'machine'], `unknown machine "${st.fleet.machine}"`);
      if ('fleet' in st) hostOnly(['steps', i, 'fleet'], st.fleet);
      if ('process' in st) {
        const pc = st.process;
        if ('end' in pc && !names.has(pc.end))
          bad(['steps', i, 'process', 'end'], `no earlier process is named "${pc.end}"`);
        if ('release' in pc && !names.has(pc.release))
          bad(['steps', i, 'process', 'release'], `no earlier process is named "${pc.release}"`);
        else if ('release' in pc && !s.fleet.holders.some((h) => h.name === pc.release && h.stuck !== undefined))
          bad(['steps', i, 'process', 'release'], `"${pc.release}" is not a stuck holder (stuck: Z or D)`);
        if ('start' in pc) {
          if (!machines.has(pc.start.machine))
            bad(['steps', i, 'process', 'start', 'machine'], `unknown machine "${pc.start.machine}"`);
          if (pc.start.takePidOf !== undefined && !names.has(pc.start.takePidOf))
            bad(['steps', i, 'process', 'start', 'takePidOf'], `no earlier process is named "${pc.start.takePidOf}"`);
          if (names.has(pc.start.name))
            bad(['steps', i, 'process', 'start', 'name'], `duplicate process name "${pc.start.name}"`);
          names.add(pc.start.name);
        }
      }
    });
    (s.expect?.alerts ?? []).forEach((a, i) => checkAlertTarget(['expect', 'alerts', i], a, 'an alerts expectation'));
    for (const u of Object.keys(s.expect?.answers ?? {}))
      if (!users.includes(u)) bad(['expect', 'answers', u], `unknown user "${u}"`);
    for (const n of [
      ...(s.expect?.signalled ?? []),
      ...(s.expect?.notSignalled ?? []),
      ...Object.keys(s.expect?.signalCounts ?? {}),
      ...Object.keys(s.expect?.signalFrom ?? {}),
    ])
      if (!names.has(n)) bad(['expect'], `unknown process name "${n}"`);
  });

export type Scenario = z.output<typeof ScenarioSchema>;
export type MachineChange = z.output<typeof MachineChange>;

/** Slack user ids by name (list form: `alice` → `U0ALICE`). */
export function userIds(s: Scenario): Record<string, string> {
  if (!Array.isArray(s.users)) return { ...s.users };
  return Object.fromEntries(s.users.map((n) => [n, `U0${n.toUpperCase().replace(/[^A-Z0-9]/g, '')}`]));
}

export class ScenarioFileError extends Error {}

interface Problem {
  path: PropertyKey[];
  message: string;
}

const at = (v: unknown, path: readonly PropertyKey[]): unknown =>
  path.reduce<unknown>(
    (o, k) => (typeof o === 'object' && o !== null ? (o as Record<PropertyKey, unknown>)[k] : undefined),
    v,
  );

/**
 * One problem per line. A value that fits none of a union's shapes (a step, a condition) is told
 * by the shape it was meant to be: the one that knows its keys and misses the fewest
 * (`steps.3.clickAlert.button: must be status, …` rather than "Invalid input").
 */
function explain(i: z.core.$ZodIssue, base: PropertyKey[], raw: unknown): Problem[] {
  const path = [...base, ...i.path];
  if (i.code === 'invalid_union' && i.errors.length > 0) {
    const options = i.errors.map((errs) => errs.flatMap((e) => explain(e, path, raw)));
    // A problem with the value as a whole (wrong type, a key this shape does not have) or a key
    // missing from it says "not this shape"; one inside says "this shape, one thing wrong".
    const cost = (ps: Problem[]) =>
      ps.reduce((n, p) => n + (p.path.length <= path.length || at(raw, p.path) === undefined ? 100 : 1), 0);
    const best = options.reduce((a, o) => (cost(o) < cost(a) ? o : a));
    if (best.length > 0) return best;
  }
  return [{ path, message: i.message }];
}

/** Parses YAML text; throws ScenarioFileError listing every problem with its path. */
export function parseScenario(text: string, source = 'scenario'): Scenario {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (e) {
    throw new ScenarioFileError(`${source}: not valid YAML: ${e instanceof Error ? e.message : String(e)}`);
  }
  const r = ScenarioSchema.safeParse(raw);
  if (!r.success) {
    const lines = r.error.issues
      .flatMap((i) => explain(i, [], raw))
      .map((x) => `  ${x.path.join('.') || '(top)'}: ${x.message}`);
    throw new ScenarioFileError(`${source}: invalid scenario:\n${lines.join('\n')}`);
  }
  return r.data;
}

export function loadScenario(file: string): Scenario {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ScenarioFileError(`${file}: cannot read: ${e instanceof Error ? e.message : String(e)}`);
  }
  return parseScenario(text, file);
}
