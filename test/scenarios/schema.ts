/**
 * The scenario file format (YAML), as a zod schema. See README.md in this folder for the prose
 * version. A scenario is data: the fleet to build, who the Slack users are, and the steps to
 * play. Nothing in it is code, so a new incident is one new YAML file.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

const machineId = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'must be a machine id like kpro5 or ct129');
const userName = z.string().regex(/^[a-z][a-z0-9_-]{0,30}$/, 'must be a lower-case user name like alice');
const slackUserId = z.string().regex(/^[UW][A-Z0-9]{2,}$/, 'must be a Slack user ID like U0ALICE001');
const label = z.string().regex(/^[A-Za-z0-9_-]{1,40}$/, 'must be a short label (letters, digits, _ or -)');

/** A regex as written in a scenario; a leading `(?i)` makes it case-insensitive (JS has no inline flags). */
export function toRegExp(p: string): RegExp {
  return p.startsWith('(?i)') ? new RegExp(p.slice(4), 'i') : new RegExp(p);
}

const regex = z.string().min(1).refine(
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
export const Duration = z.union([
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
    sshUser: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/).optional(),
    /**
     * Host GPU indices passed to it (`pct config`: `devN: /dev/nvidiaM`); it sees them renumbered
     * from 0 in bus order, and its holders name GPUs in its own numbering. Default: all, same numbers.
     */
    gpus: z.array(z.number().int().min(0).max(15)).min(1).max(16).optional(),
    /** Its PID 1 is a GPU holder (an application as the container's init), named for expectations. */
    init: z.lazy(() => InitHolder).optional(),
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
  /** Command line shown by ps (argv split on spaces). */
  title: z.string().min(1).max(200).optional(),
  ignoreTerm: z.boolean().optional(),
  /** Run as this user (created when missing). */
  user: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/).optional(),
};

const Holder = z
  .object({
    ...ProcessCommon,
    gpus: z.array(GpuAlloc).min(1),
    /** Memory stays in use this long after the process dies (driver teardown). */
    dieDelay: Duration.optional(),
  })
  .strict();

const Bystander = z.object({ ...ProcessCommon, title: z.string().min(1).max(200) }).strict();

const InitHolder = z.object({ name: label, title: z.string().min(1).max(200).optional(), gpus: z.array(GpuAlloc).min(1) }).strict();

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
      .object({ kind: z.enum(['gpu_lost', 'nvml_version_mismatch']).nullable(), gpu: z.number().int().min(0).optional() })
      .strict()
      .optional(),
    /** Memory held with no process (hosts only). */
    leak: z.object({ gpu: z.number().int().min(0), mib: z.number().int().min(0) }).strict().optional(),
    /** The machine's sshd restarts with a new host key; the bot keeps the old pin. */
    replaceHostKey: z.literal(true).optional(),
    /** A host becomes unreachable; a container stops. */
    stop: z.literal(true).optional(),
    /** A stopped machine starts again (a container: new init, new PID namespace). */
    start: z.literal(true).optional(),
    /** A container stops and starts again: a new PID namespace, its processes gone. */
    restart: z.literal(true).optional(),
  })
  .strict()
  .refine((c) => Object.keys(c).length > 1, { message: 'say what changes (hang, ram, gpuError, leak, replaceHostKey, stop, start or restart)' });

/**
 * One change to a process, mid-run: `end` SIGKILLs a named process from outside (as if it died on
 * its own) and waits until its PID is free; `start` starts a new named process (a holder when it
 * has gpus), optionally on the very PIDs (host and container) of an earlier named process.
 */
export const ProcessChange = z.union([
  z.object({ end: label }).strict(),
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

/** What a step can wait for in an incident's thread. */
export const Condition = z.union([
  z.enum(['thread-done', 'card-posted', 'card-decided', 'card-expired', 'verdict']),
  z.object({ threadText: regex }).strict(),
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
    channel: z.string().regex(/^[CGD][A-Z0-9]{2,}$/).optional(),
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

const WaitStep = z.object({ ...StepCommon, wait: Duration }).strict();
const WaitForStep = z.object({ ...StepCommon, waitFor: Condition }).strict();
const FleetStep = z.object({ ...StepCommon, fleet: MachineChange }).strict();
const ProcessStep = z.object({ ...StepCommon, process: ProcessChange }).strict();

export const Step = z.union([CommandStep, ClickStep, WaitStep, WaitForStep, FleetStep, ProcessStep]);
export type Step = z.output<typeof Step>;

/** Checks the report against the story; a failed check is a finding about the bot, not a broken run. */
const Expect = z
  .object({
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
    signalFrom: z.record(label, z.partialRecord(z.enum(['SIGTERM', 'SIGKILL']), z.enum(['container', 'host']))).optional(),
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
    channel: z.string().regex(/^[CGD][A-Z0-9]{2,}$/).default('C0ONCALL01'),
    settings: z
      .object({
        /** Per-command timeout the bot uses on every machine (default 20 s; short values keep fault scenarios quick). */
        commandTimeoutSec: z.number().int().min(1).max(600).optional(),
        connectTimeoutSec: z.number().int().min(1).max(120).optional(),
        /** Approval card lifetime (the bot accepts 30 s at least). */
        approvalTtlSec: z.number().int().min(30).optional(),
        termGraceSec: z.number().int().min(1).optional(),
        /** Longest wait for GPU memory to come back after signals (GPU_MEDIC_RELEASE_TIMEOUT_SEC). */
        releaseTimeoutSec: z.number().int().min(1).optional(),
        /** How often the worker re-reads processes and memory while it waits (GPU_MEDIC_POLL_MS). */
        pollMs: z.number().int().min(100).max(60_000).optional(),
        /** After the last step, how long to wait for every incident to finish and render. Default 20s. */
        settle: Duration.optional(),
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
    s.approvers.forEach((a, i) => {
      if (!a.startsWith('U') && !a.startsWith('W') && !users.includes(a)) bad(['approvers', i], `unknown user "${a}" (add it to users)`);
    });
    (['holders', 'bystanders'] as const).forEach((kind) =>
      s.fleet[kind].forEach((p, i) => {
        if (!machines.has(p.machine)) bad(['fleet', kind, i, 'machine'], `unknown machine "${p.machine}"`);
        if (names.has(p.name)) bad(['fleet', kind, i, 'name'], `duplicate process name "${p.name}"`);
        names.add(p.name);
      }),
    );
    s.fleet.containers.forEach((c, i) => {
      if (c.init !== undefined) {
        if (names.has(c.init.name)) bad(['fleet', 'containers', i, 'init', 'name'], `duplicate process name "${c.init.name}"`);
        names.add(c.init.name);
      }
      if (!hosts.has(c.host)) bad(['fleet', 'containers', i, 'host'], `unknown host "${c.host}"`);
      if (c.sshUser !== undefined && !c.ownAddress) bad(['fleet', 'containers', i, 'sshUser'], 'sshUser needs ownAddress: true');
    });
    s.fleet.leaks.forEach((l, i) => {
      if (!hosts.has(l.host)) bad(['fleet', 'leaks', i, 'host'], `unknown host "${l.host}"`);
    });
    s.fleet.faults.forEach((f, i) => {
      if (!machines.has(f.machine)) bad(['fleet', 'faults', i, 'machine'], `unknown machine "${f.machine}"`);
    });
    const ids = new Set<string>();
    s.steps.forEach((st, i) => {
      if ('as' in st && !users.includes(st.as)) bad(['steps', i, 'as'], `unknown user "${st.as}" (add it to users)`);
      if (st.incident !== undefined && !ids.has(st.incident)) bad(['steps', i, 'incident'], `no earlier command step has id "${st.incident}"`);
      if ('command' in st && st.id !== undefined) {
        if (ids.has(st.id)) bad(['steps', i, 'id'], `duplicate id "${st.id}"`);
        ids.add(st.id);
      }
      if ('fleet' in st && !machines.has(st.fleet.machine)) bad(['steps', i, 'fleet', 'machine'], `unknown machine "${st.fleet.machine}"`);
      if ('process' in st) {
        const pc = st.process;
        if ('end' in pc && !names.has(pc.end)) bad(['steps', i, 'process', 'end'], `no earlier process is named "${pc.end}"`);
        if ('start' in pc) {
          if (!machines.has(pc.start.machine)) bad(['steps', i, 'process', 'start', 'machine'], `unknown machine "${pc.start.machine}"`);
          if (pc.start.takePidOf !== undefined && !names.has(pc.start.takePidOf)) bad(['steps', i, 'process', 'start', 'takePidOf'], `no earlier process is named "${pc.start.takePidOf}"`);
          if (names.has(pc.start.name)) bad(['steps', i, 'process', 'start', 'name'], `duplicate process name "${pc.start.name}"`);
          names.add(pc.start.name);
        }
      }
    });
    for (const u of Object.keys(s.expect?.answers ?? {})) if (!users.includes(u)) bad(['expect', 'answers', u], `unknown user "${u}"`);
    for (const n of [...(s.expect?.signalled ?? []), ...(s.expect?.notSignalled ?? []), ...Object.keys(s.expect?.signalCounts ?? {}), ...Object.keys(s.expect?.signalFrom ?? {})])
      if (!names.has(n)) bad(['expect'], `unknown process name "${n}"`);
  });

export type Scenario = z.output<typeof ScenarioSchema>;
export type ScenarioInput = z.input<typeof ScenarioSchema>;
export type MachineChange = z.output<typeof MachineChange>;
export type GpuAllocation = z.output<typeof GpuAlloc>;

/** Slack user ids by name (list form: `alice` → `U0ALICE`). */
export function userIds(s: Scenario): Record<string, string> {
  if (!Array.isArray(s.users)) return { ...s.users };
  return Object.fromEntries(s.users.map((n) => [n, `U0${n.toUpperCase().replace(/[^A-Z0-9]/g, '')}`]));
}

export class ScenarioFileError extends Error {}

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
    const lines = r.error.issues.map((i) => `  ${i.path.join('.') || '(top)'}: ${i.message}`);
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
