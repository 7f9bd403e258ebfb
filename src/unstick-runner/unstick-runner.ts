import type { ContainerFailure } from '../gpu/diagnose.ts';
import { recheckTarget, staleReasonText, type ProcReading, type StaleReason } from '../gpu/holders.ts';
import type { ProcessIdentity } from '../gpu/process-ref.ts';
import { parseComputeAppsCsv, parseQueryGpuCsv } from '../gpu/parse/index.ts';
import { IDLE_MIB } from '../gpu/snapshot.ts';
import type { Gpu, GpuProcess } from '../gpu/types.ts';
import { CodedError, ErrorCode, asCodedError } from '../errors.ts';
import type { UnstickEvent } from '../incident/unstick-events.ts';
import type { CommandSpec } from '../agent-grammar/command-spec.ts';
import type { ExecResult, Route } from '../ssh/types.ts';
import { APP_FIELDS, GPU_FIELDS, queryComputeApps, queryGpus } from '../agent-grammar/templates/snapshot-commands.ts';
import { recordOf } from '../readings/snapshot.ts';
import type { StepOutcome } from '../plan/unstick-plan.ts';
import { sendSignals, type SignalledTarget } from './send-signals.ts';
import { outcomeText } from '../agent-grammar/templates/signal.ts';
import {
  assertSafeArgv,
  gpuReset,
  hostGpuApps,
  hostGpuByUuid,
  parsePersistenceMode,
  parseProcReadings,
  persistenceMode,
  readProcs,
  setPersistence,
  type Signal,
} from '../agent-grammar/templates/unstick-commands.ts';
import {
  sealedPersistence,
  type CommandRole,
  type PlannedCommand,
  type Step,
  type StepTarget,
  type TargetGpu,
} from '../plan/unstick-plan.ts';
import { readContainerInit, readProcsOn, type ProcsRead } from '../readings/unstick-readings.ts';
import { seconds } from '../text/units.ts';
import type { DestructiveIds } from '../agent-grammar/arg-types.ts';
import { withEnvelopes, type StepEnvelopes } from '../agent-grammar/envelopes.ts';

/**
 * Runs one planned step through the executor, at most once (step guard), logging every command
 * and every signal as an event. Tier 1 signals from inside the container by container PID; tier 2
 * runs on the Proxmox host only. Every target is re-checked (PID + start time + namespace)
 * immediately before it is signalled; anything that changed is skipped and said so.
 */

export interface StepRunnerDeps {
  exec(route: Route, spec: CommandSpec): Promise<ExecResult>;
  /** Appends to this incident's log. */
  append(event: UnstickEvent): Promise<void>;
  steps: {
    claimStep(incidentId: string, stepId: string, by: string, now: number): Promise<boolean>;
    finishStep(incidentId: string, stepId: string, by: string, outcome: StepOutcome, now: number): Promise<boolean>;
  };
  now(): Date;
  sleep(ms: number): Promise<void>;
  /** Names this job attempt in the step guard. */
  workerId: string;
  commandTimeoutMs: number;
}

export interface StepContext {
  incidentId: string;
  /** The target container's own view (its address, or `pct exec` on its host). */
  containerRoute: Route;
  /** The Proxmox host itself (never `pct exec`). */
  hostRoute: Route;
  vmid: number;
  /**
   * Host GPUs and compute apps as last read before the step: memory no listed process accounts
   * for is the baseline a release is measured against (a leak does not count as "not released").
   */
  hostGpus: readonly Gpu[];
  hostApps: readonly GpuProcess[];
  /**
   * What the step acts with, since the host's agent signals nothing without signed authority: its approval id
   * (`none`: tier 1) and the envelopes every destructive command carries to the host's agent. Null envelopes:
   * a destructive command is refused before it is sent.
   */
  authority: { approvalId: string; envelopes: StepEnvelopes | null };
}

export interface StepResult {
  outcome: StepOutcome | 'interrupted';
  /** Targets the container could not stop, and why: the re-diagnosis hands them to the host. */
  containerFailed: ContainerFailure[];
  /** Signals delivered. */
  sent: number;
  /** GPU memory of the step's GPUs came back before `releaseTimeoutMs` (null: nothing to wait for). */
  released: boolean | null;
  message: string;
  /** Why the step stopped early (connection lost, timeout), or null when it ran to its end. */
  error: string | null;
}

type StepRun = StepResult & { outcome: StepOutcome };

/** Runs a step exactly as planned, once; a step already claimed by an earlier attempt is reported `interrupted`. */
export async function runStep(step: Step, ctx: StepContext, deps: StepRunnerDeps): Promise<StepResult> {
  const started = deps.now().getTime();
  const at = (): string => deps.now().toISOString();
  await deps.append({
    type: 'step_started',
    at: at(),
    stepId: step.id,
    kind: step.kind,
    tier: step.tier,
    machineId: step.machineId,
    explanation: step.explanation,
  });

  /** Ends a step that sent nothing to any machine. */
  const endUnrun = async (
    outcome: 'failed' | 'interrupted',
    message: string,
    error: string | null,
  ): Promise<StepResult> => {
    await deps.append({
      type: 'step_finished',
      at: at(),
      stepId: step.id,
      outcome,
      durationMs: deps.now().getTime() - started,
      message,
    });
    return { outcome, containerFailed: [], sent: 0, released: null, message, error };
  };

  // So that a stolen worker key cannot signal: every step signals or resets, and the host's agent does that only
  // with the bot-signed request (tier 1) or decision (tier 2) and the worker-signed plan: without them nothing is
  // sent at all.
  const want = step.tier === 1 ? 'request' : 'decision';
  const env = ctx.authority.envelopes;
  const have = env === null ? null : env.decisions.length > 0 ? 'decision' : 'request';
  if (have !== want) {
    const message = `Not run: this tier-${step.tier} step has ${have === null ? 'no signed envelopes' : `the signed ${have} instead of the signed ${want}`} for the host's agent, so nothing was sent to any machine.`;
    return endUnrun('failed', message, message);
  }

  // Claimed before the first command, so a job BullMQ re-runs after a worker died never signals twice.
  if (!(await deps.steps.claimStep(ctx.incidentId, step.id, deps.workerId, started))) {
    const message =
      'An earlier attempt already started this step and did not report back (its worker stopped). It is not run again; a fresh snapshot follows.';
    return endUnrun('interrupted', message, null);
  }

  const run = new Run(step, ctx, deps);
  let result: StepRun;
  try {
    result =
      step.kind === 'container_signal'
        ? await run.containerSignal()
        : step.kind === 'host_kill'
          ? await run.hostKill()
          : await run.hostReset();
  } catch (e) {
    const ce = asCodedError(e);
    result = {
      outcome: 'failed',
      containerFailed: [],
      sent: run.sent,
      released: null,
      error: ce.message,
      message: `Stopped: ${ce.message}. ${[
        run.sent > 0 ? `${run.sent} signal(s) had been sent before that.` : '',
        run.inFlight > 0
          ? `The SIG${run.inFlightSignal ?? '?'} command for ${run.inFlight} process(es) was being sent when it stopped and no answer was recorded: they may have been signalled.`
          : '',
        run.sent === 0 && run.inFlight === 0 ? 'Nothing was signalled.' : '',
      ]
        .filter((x) => x !== '')
        .join(' ')} The step is not retried automatically.`,
    };
  }
  const end = deps.now().getTime();
  await deps.steps.finishStep(ctx.incidentId, step.id, deps.workerId, result.outcome, end);
  await deps.append({
    type: 'step_finished',
    at: at(),
    stepId: step.id,
    outcome: result.outcome,
    durationMs: end - started,
    message: result.message,
  });
  return result;
}

/**
 * An earlier attempt of this job stopped inside this reset (a destructive command is logged) and
 * the step is not run again: its GPUs whose sealed original persistence mode is on get it back
 * (`nvidia-smi -pm 1`, the plan's own command), whatever the earlier attempt got to. Each command
 * is logged; returns what was restored, in plain words.
 */
export async function restorePersistence(step: Step, ctx: StepContext, deps: StepRunnerDeps): Promise<string[]> {
  if (step.kind !== 'host_reset') return [];
  const run = new Run(step, ctx, deps);
  const said: string[] = [];
  for (const g of step.gpus) {
    const on = step.commands.find((c) => c.role === 'persistence_on' && c.gpuUuid === g.uuid);
    if (g.uuid === null || !on || sealedPersistence(step, g.uuid) !== true) continue;
    const r = await run.command('persistence_on', on);
    said.push(
      `GPU ${g.index ?? '?'} (${g.uuid}): persistence mode ${r.code === 0 && !r.timedOut ? 'restored to on' : `could not be restored (exit ${r.code ?? r.signal ?? '?'})`}`,
    );
  }
  return said;
}

/** The memory of one GPU no listed process accounts for (a leak, or a context still being torn down). */
function unaccounted(gpu: Gpu, apps: readonly GpuProcess[]): number | null {
  if (gpu.memoryUsedMiB === null) return null;
  const listed = apps.filter(
    (a) => (a.gpuUuid !== null && a.gpuUuid === gpu.uuid) || (a.gpuUuid === null && a.gpuIndex === gpu.index),
  );
  return Math.max(0, gpu.memoryUsedMiB - listed.reduce((n, a) => n + (a.usedMiB ?? 0), 0));
}

/** The two read-only status templates the release poll reuses (commands.ts), word for word. */
const STATUS_READS = [queryGpus({ timeoutMs: 1 }).argv, queryComputeApps({ timeoutMs: 1 }).argv].map((a) =>
  a.join('\0'),
);
function isStatusRead(argv: readonly string[]): boolean {
  return STATUS_READS.includes(argv.join('\0'));
}

/** A stale re-check in the words the signal room uses, so a reused PID reads the same wherever it was caught. */
function staleText(s: StaleReason): string {
  return s === 'pid_reused' ? outcomeText({ pid: 0, result: 'skipped', reason: 'pid_reused' }) : staleReasonText(s);
}

function sameGpu(g: Gpu, t: TargetGpu): boolean {
  return t.uuid !== null ? g.uuid === t.uuid : g.index === t.hostIndex;
}

class Run {
  sent = 0;
  /** Targets of a signal command being sent that has not answered yet (a lost answer leaves them here). */
  inFlight = 0;
  inFlightSignal: Signal | null = null;

  constructor(
    private readonly step: Step,
    private readonly ctx: StepContext,
    private readonly deps: StepRunnerDeps,
  ) {}

  private at(): string {
    return this.deps.now().toISOString();
  }

  private routeOf(on: PlannedCommand['on']): Route {
    return on === 'container' ? this.ctx.containerRoute : this.ctx.hostRoute;
  }

  private get ids(): DestructiveIds {
    return { incidentId: this.ctx.incidentId, approvalId: this.ctx.authority.approvalId };
  }

  /**
   * A planned command rebuilt from its template (with this step's incident and approval ids, which
   * a destructive agent verb carries); refused when the rebuilt argv is not the planned one.
   */
  private specOf(c: PlannedCommand): CommandSpec {
    const t = { timeoutMs: c.timeoutMs };
    const u = c.gpuUuid ?? '';
    const spec: CommandSpec | null =
      c.gpuUuid === undefined
        ? null
        : c.role === 'read_gpus'
          ? hostGpuByUuid(u, t)
          : c.role === 'check_apps'
            ? hostGpuApps(u, t)
            : c.role === 'read_persistence'
              ? persistenceMode(u, t)
              : c.role === 'persistence_off' || c.role === 'persistence_on'
                ? setPersistence(u, c.role === 'persistence_on', { ...t, ...this.ids })
                : c.role === 'reset'
                  ? gpuReset(u, { ...t, ...this.ids })
                  : null;
    if (spec === null || spec.argv.join('\0') !== c.argv.join('\0'))
      throw new CodedError(
        ErrorCode.BadCommand,
        `The planned ${c.role} command is not the one its template makes; nothing was run.`,
      );
    return spec;
  }

  /** Every command: template-only argv, never a reset inside a container, envelopes on a destructive one, one `command` event. */
  private async exec(role: CommandRole, on: PlannedCommand['on'], plain: CommandSpec): Promise<ExecResult> {
    const spec = withEnvelopes(plain, this.ctx.authority.envelopes);
    if (!isStatusRead(spec.argv)) assertSafeArgv(spec.argv);
    if (
      on === 'container' &&
      (spec.argv.includes('--gpu-reset') || spec.argv.includes('-r') || spec.argv.includes('-pm'))
    )
      throw new CodedError(
        ErrorCode.BadCommand,
        'A GPU reset or persistence change was about to run inside a container; only the host may do that. Nothing was run.',
      );
    if (on === 'host' && this.step.tier !== 2 && (role === 'kill' || role === 'term' || role === 'reset'))
      throw new CodedError(
        ErrorCode.BadCommand,
        'A host-level signal or reset was about to run without an approved tier-2 step. Nothing was run.',
      );
    const r = await this.deps.exec(this.routeOf(on), spec);
    await this.deps.append({ type: 'command', at: this.at(), stepId: this.step.id, role, on, record: recordOf(r) });
    return r;
  }

  /** One planned host command as planned. */
  async command(role: CommandRole, c: PlannedCommand): Promise<ExecResult> {
    return this.exec(role, c.on, this.specOf(c));
  }

  private async readProcs(on: PlannedCommand['on'], pids: readonly number[]): Promise<ProcsRead | null> {
    // readProcsOn runs the same template; routed through exec() so it is logged like any command.
    return readProcsOn(this.routeOf(on), pids, {
      exec: (_route, spec) => this.exec('read_procs', on, spec),
      now: this.deps.now,
      commandTimeoutMs: this.deps.commandTimeoutMs,
    });
  }

  /** Recorded before the signal command goes out: whatever happens next, the log names whom it was for. */
  private async intent(on: 'container' | 'host', signal: Signal, targets: readonly StepTarget[]): Promise<void> {
    if (targets.length === 0) return;
    this.inFlight = targets.length;
    this.inFlightSignal = signal;
    await this.deps.append({
      type: 'signal_intent',
      at: this.at(),
      stepId: this.step.id,
      on,
      signal,
      targets: targets.map((t) => ({
        hostPid: t.hostPid,
        containerPid: t.containerPid,
        startTimeTicks: t.startTimeTicks,
        cmdline: t.cmdline,
      })),
    });
  }

  private async signalled(
    t: ProcessIdentity,
    signal: Signal,
    result: 'sent' | 'gone' | 'skipped',
    reason: string | null,
    check?: 'pidfd' | 'shell' | null,
    refusedBy?: 'recheck' | 'not_permitted' | 'failed',
  ): Promise<void> {
    if (result === 'sent') this.sent++;
    await this.deps.append({
      type: 'signalled',
      at: this.at(),
      stepId: this.step.id,
      hostPid: t.hostPid,
      containerPid: t.containerPid,
      startTimeTicks: t.startTimeTicks,
      ...(check ? { check } : {}),
      signal,
      cmdline: t.cmdline,
      result,
      reason,
      ...(result === 'skipped' ? { refusedBy: refusedBy ?? 'recheck' } : {}),
    });
  }

  /**
   * A container-side re-check: same container PID, same start time. A non-root container login
   * may not read another user's `ns/pid` link; the PID was read in the container's own /proc,
   * so its namespace is the container's by construction and only PID + start time decide.
   */
  private recheckInContainer(t: StepTarget, readings: readonly ProcReading[]): StaleReason | null {
    const r = readings.find((x) => x.pid === t.containerPid);
    const reading = r && r.stat !== null && r.pidNs === null ? { ...r, pidNs: t.pidNs } : r;
    return recheckTarget(t, { reading, view: 'container', targetPidNs: t.pidNs, gpuHostPids: null });
  }

  /** Container side: the check-and-signal command for exactly these targets, by container PID. */
  private async sendSignal(signal: Signal, targets: readonly StepTarget[]): Promise<Map<number, SignalledTarget>> {
    const out = new Map<number, SignalledTarget>();
    const pidNs = targets[0]?.pidNs ?? null;
    await this.intent('container', signal, targets);
    const done = await sendSignals(
      { side: 'container', signal, pidNs, targets, ids: this.ids },
      {
        exec: (spec) => this.exec(signal === 'TERM' ? 'term' : 'kill', 'container', spec),
        commandTimeoutMs: this.deps.commandTimeoutMs,
      },
    );
    this.inFlight = 0;
    for (const s of done) {
      out.set(s.identity.containerPid, s);
      await this.logSignal(
        s,
        s.outcome.result === 'failed' ? `the container may not signal it: ${s.reason ?? ''}` : s.reason,
      );
    }
    return out;
  }

  private async logSignal(s: SignalledTarget, reason: string | null): Promise<void> {
    await this.signalled(
      s.identity,
      s.signal,
      s.result === 'failed' ? 'skipped' : s.result,
      reason,
      s.check,
      s.result === 'skipped'
        ? 'recheck'
        : s.outcome.result === 'failed'
          ? s.outcome.reason === 'not_permitted'
            ? 'not_permitted'
            : 'failed'
          : undefined,
    );
  }

  /** Tier 1: TERM exactly the targets, wait for them (by PID + start time), KILL the survivors, wait for the memory. */
  async containerSignal(): Promise<StepRun> {
    const { step } = this;
    /** Refused by the kernel or unreadable: the container tried and cannot stop them. */
    const failed: ContainerFailure[] = [];
    /** Not visible in the container's /proc: exited, or hidden from this login (hidepid); the host decides which. */
    const unseen: ContainerFailure[] = [];
    const pre = await this.readProcs(
      'container',
      step.targets.map((t) => t.containerPid),
    );
    const live: StepTarget[] = [];
    for (const t of step.targets) {
      const stale = pre?.complete ? this.recheckInContainer(t, pre.readings) : 'unreadable';
      if (stale === null) live.push(t);
      else {
        await this.signalled(t, 'TERM', stale === 'gone' ? 'gone' : 'skipped', staleText(stale));
        // Still holding per the host, yet the container cannot see it as the same process: the host must look.
        if (stale === 'gone') unseen.push({ process: t, reason: 'the container does not see it' });
        else if (stale !== 'pid_reused')
          failed.push({ process: t, reason: `the container could not read it (${staleText(stale)})` });
      }
    }
    const termOut = await this.sendSignal('TERM', live);
    let waiting = live.filter((t) => termOut.get(t.containerPid)?.result === 'sent');
    for (const t of live) {
      const o = termOut.get(t.containerPid);
      if (o?.result === 'failed') failed.push({ process: t, reason: o.reason ?? 'the signal failed' });
      // Refused by the identity check inside the container: the host looks again with its own view.
      else if (
        o?.result === 'skipped' &&
        o.outcome.result === 'skipped' &&
        o.outcome.reason !== 'pid_reused' &&
        o.outcome.reason !== 'not_holding'
      )
        failed.push({ process: t, reason: `the container could not check it (${o.reason ?? '?'})` });
    }

    // Grace: poll identities, so a process that exits early ends the wait early.
    const graceStart = this.deps.now().getTime();
    while (waiting.length > 0) {
      const left = step.graceMs - (this.deps.now().getTime() - graceStart);
      if (left <= 0) break;
      await this.deps.sleep(Math.min(step.pollIntervalMs, left));
      const r = await this.readProcs(
        'container',
        waiting.map((t) => t.containerPid),
      );
      if (!r?.complete) continue;
      waiting = waiting.filter((t) => this.recheckInContainer(t, r.readings) === null);
    }

    let killed = 0;
    if (waiting.length > 0) {
      // Survivors re-validated right before SIGKILL: only the same processes, never a reused PID.
      const r = await this.readProcs(
        'container',
        waiting.map((t) => t.containerPid),
      );
      const survivors: StepTarget[] = [];
      for (const t of waiting) {
        const stale = r?.complete ? this.recheckInContainer(t, r.readings) : 'unreadable';
        if (stale === null) survivors.push(t);
        else if (stale !== 'gone') await this.signalled(t, 'KILL', 'skipped', staleText(stale));
      }
      const killOut = await this.sendSignal('KILL', survivors);
      killed = [...killOut.values()].filter((o) => o.result === 'sent').length;
      for (const t of survivors) {
        const o = killOut.get(t.containerPid);
        if (o?.result === 'failed') failed.push({ process: t, reason: o.reason ?? 'the signal failed' });
      }
    }

    const termed = live.filter((t) => termOut.get(t.containerPid)?.result === 'sent').length;
    // Only the memory of what was signalled is waited for: a holder the container could not stop
    // goes to the host-level card at once, not after the release timeout.
    const signalled = live.filter(
      (t) => termOut.get(t.containerPid)?.result === 'sent' && !failed.some((f) => f.process === t),
    );
    const release =
      signalled.length > 0
        ? await this.waitRelease(
            signalled.flatMap((t) => t.gpus),
            signalled,
          )
        : null;
    const parts: string[] = [];
    if (termed > 0) parts.push(`SIGTERM reached ${termed} of ${step.targets.length} process(es)`);
    if (killed > 0) parts.push(`${killed} ignored it for ${seconds(step.graceMs)} and got SIGKILL`);
    if (failed.length > 0)
      parts.push(
        `the container could not stop ${failed.map((f) => `PID ${f.process.containerPid} (${f.reason})`).join(', ')}: only the host can`,
      );
    if (release)
      parts.push(
        release.released
          ? `GPU memory came back after ${seconds(release.waitedMs)}`
          : `GPU memory was still in use after ${seconds(release.waitedMs)}`,
      );
    if (parts.length === 0) parts.push('nothing needed a signal');
    const stopped = step.targets.length - failed.length;
    const outcome: StepOutcome =
      failed.length === 0 ? (this.sent > 0 ? 'done' : 'skipped') : stopped > 0 && this.sent > 0 ? 'partial' : 'failed';
    return {
      outcome,
      containerFailed: [...failed, ...unseen],
      sent: this.sent,
      released: release?.released ?? null,
      message: `${parts.join('; ')}.`,
      error: null,
    };
  }

  /** Tier 2 kill: re-check each target on the host, then check-and-SIGKILL (one act, by pidfd) on the host for those that still match. */
  async hostKill(): Promise<StepRun> {
    const { step } = this;
    const init = await readContainerInit(this.ctx.hostRoute, this.ctx.vmid, {
      exec: (_route, spec) => this.exec('read_init', 'host', spec),
      now: this.deps.now,
      commandTimeoutMs: this.deps.commandTimeoutMs,
    });
    // Built here from the templates and the step's identity set, never from argv read back.
    const t0 = { timeoutMs: this.deps.commandTimeoutMs };
    const readR = await this.exec(
      'read_procs',
      'host',
      readProcs(
        step.targets.map((x) => x.hostPid),
        t0,
      ),
    );
    const appsR = await this.exec('check_apps', 'host', queryComputeApps(t0));
    const readings = readR.timedOut ? null : parseProcReadings(readR.stdout);
    const apps = appsR.code === 0 && !appsR.timedOut ? parseComputeAppsCsv(appsR.stdout, [...APP_FIELDS]) : null;
    const gpuPids = apps?.ok && apps.value.error === null ? new Set(apps.value.processes.map((p) => p.pid)) : null;

    const matching: StepTarget[] = [];
    for (const t of step.targets) {
      let reason: string | null = null;
      if (init.pidNs === null)
        reason = `container ${this.ctx.vmid}'s PID namespace could not be read: ${init.problem ?? 'unknown reason'}`;
      else if (init.pidNs !== t.pidNs)
        reason = 'the container was restarted since the plan (its PID namespace changed)';
      else if (readings === null || !readings.complete) reason = 'its /proc entry could not be read completely';
      else if (gpuPids === null)
        reason = 'host nvidia-smi could not list the GPU processes, so "still holds GPU memory" could not be confirmed';
      else {
        const stale = recheckTarget(t, {
          reading: readings.readings.find((r) => r.pid === t.hostPid),
          view: 'host',
          targetPidNs: init.pidNs,
          gpuHostPids: gpuPids,
          vmid: this.ctx.vmid,
        });
        if (stale !== null) reason = staleText(stale);
      }
      if (reason === null) matching.push(t);
      else await this.signalled(t, 'KILL', 'skipped', reason);
    }

    // Check and signal as one act on the host (pidfd): PID, start time, the container's PID
    // namespace as read just now, its container PID, an open GPU device; then SIGKILL.
    await this.intent('host', 'KILL', matching);
    const done = await sendSignals(
      { side: 'host', signal: 'KILL', pidNs: init.pidNs, targets: matching, ids: this.ids },
      { exec: (spec) => this.exec('kill', 'host', spec), commandTimeoutMs: this.deps.commandTimeoutMs },
    );
    this.inFlight = 0;
    let sent = 0;
    const refused: string[] = [];
    for (const d of done) {
      if (d.result === 'sent') sent++;
      if (d.result === 'failed') refused.push(`host PID ${d.identity.hostPid}`);
      await this.logSignal(d, d.reason);
    }
    const hit = done.filter((d) => d.result === 'sent').map((d) => d.identity);
    const release =
      sent > 0
        ? await this.waitRelease(
            step.targets.filter((t) => hit.includes(t)).flatMap((t) => t.gpus),
            hit,
          )
        : null;
    const skipped = step.targets.length - sent;
    const parts = [`SIGKILL on ${step.machineId} reached ${sent} of ${step.targets.length} process(es)`];
    if (skipped > 0) parts.push(`${skipped} not signalled (see above)`);
    if (refused.length > 0) parts.push(`kill failed for ${refused.join(', ')}`);
    if (release)
      parts.push(
        release.released
          ? `GPU memory came back after ${seconds(release.waitedMs)}`
          : `GPU memory was still in use after ${seconds(release.waitedMs)}`,
      );
    const outcome: StepOutcome =
      sent === step.targets.length ? 'done' : sent > 0 ? 'partial' : matching.length === 0 ? 'skipped' : 'failed';
    return {
      outcome,
      containerFailed: [],
      sent,
      released: release?.released ?? null,
      message: `${parts.join('; ')}.`,
      error: null,
    };
  }

  /** Tier 2 reset, per GPU: nothing anywhere holds it → persistence off if on → `--gpu-reset` → persistence back on. */
  async hostReset(): Promise<StepRun> {
    const { step } = this;
    const done: TargetGpu[] = [];
    const notes: string[] = [];
    for (const g of step.gpus) {
      const hi = g.hostIndex;
      // By UUID: the index the plan saw may name another GPU by now (re-enumeration after a reboot or a GPU back on the bus).
      const cmds = g.uuid === null ? [] : step.commands.filter((c) => c.gpuUuid === g.uuid);
      const get = (role: CommandRole): PlannedCommand | undefined => cmds.find((c) => c.role === role);
      const present = get('read_gpus');
      const check = get('check_apps');
      const readPm = get('read_persistence');
      const reset = get('reset');
      const label = `GPU ${g.index ?? '?'} (host GPU ${hi ?? '?'}, ${g.uuid ?? 'no UUID'})`;
      if (g.uuid === null || !present || !check || !readPm || !reset) {
        notes.push(`${label}: skipped, its commands are missing from the plan`);
        continue;
      }
      const p = await this.exec('read_gpus', 'host', this.specOf(present));
      const seen = p.code === 0 && !p.timedOut ? parseQueryGpuCsv(p.stdout, [...GPU_FIELDS]) : null;
      const now = seen?.ok && seen.value.error === null ? seen.value.gpus.find((x) => x.uuid === g.uuid) : undefined;
      if (now === undefined) {
        const said = `${p.stdout}\n${p.stderr}`.trim().split('\n')[0] ?? '';
        notes.push(
          `${label}: skipped, ${step.machineId} no longer lists that UUID (${p.timedOut ? 'timed out' : `exit ${p.code ?? p.signal}`}${said ? `: ${said.slice(0, 120)}` : ''})`,
        );
        continue;
      }
      const c = await this.exec('check_apps', 'host', this.specOf(check));
      const apps = c.code === 0 && !c.timedOut ? parseComputeAppsCsv(c.stdout, [...APP_FIELDS]) : null;
      if (!apps?.ok || apps.value.error !== null) {
        notes.push(`${label}: skipped, could not confirm that no process holds it`);
        continue;
      }
      if (apps.value.processes.length > 0) {
        notes.push(`${label}: skipped, host PID ${apps.value.processes.map((p) => p.pid).join(', ')} now holds it`);
        continue;
      }
      const pm = await this.exec('read_persistence', 'host', this.specOf(readPm));
      // The original is the sealed one (an earlier attempt may have switched it off and died); a
      // plan without it reads it now. Unknown counts as on: switched off and restored, to be safe.
      const wasOn =
        sealedPersistence(step, g.uuid) ??
        (pm.code === 0 && !pm.timedOut ? (parsePersistenceMode(pm.stdout) ?? true) : true);
      const off = get('persistence_off');
      const on = get('persistence_on');
      if (wasOn && off) await this.exec('persistence_off', 'host', this.specOf(off));
      let r: ExecResult | null = null;
      try {
        r = await this.exec('reset', 'host', this.specOf(reset));
      } finally {
        if (wasOn && on) await this.exec('persistence_on', 'host', this.specOf(on));
      }
      if (r.code === 0 && !r.timedOut) {
        done.push(g);
        notes.push(`${label}: reset`);
      } else {
        const first = `${r.stdout}\n${r.stderr}`.trim().split('\n')[0] ?? '';
        notes.push(
          `${label}: reset refused (${r.timedOut ? 'timed out' : `exit ${r.code ?? r.signal}`}${first ? `: ${first.slice(0, 160)}` : ''})`,
        );
      }
    }
    const release = done.length > 0 ? await this.waitRelease(done, [], true) : null;
    if (release)
      notes.push(
        release.released
          ? `memory back to idle after ${seconds(release.waitedMs)}`
          : `memory still in use after ${seconds(release.waitedMs)}`,
      );
    const outcome: StepOutcome = done.length === step.gpus.length ? 'done' : done.length > 0 ? 'partial' : 'failed';
    return {
      outcome,
      containerFailed: [],
      sent: 0,
      released: release?.released ?? null,
      message: `${notes.join('; ')}.`,
      error: null,
    };
  }

  /**
   * Polls host GPU memory until the step's GPUs no longer hold memory beyond what they held
   * unaccounted before the step (a reset: beyond idle), and no target is listed any more. A
   * dying rank can stay in uninterruptible sleep for tens of seconds before its memory returns:
   * memory is only called orphaned after this wait.
   */
  private async waitRelease(
    gpus: readonly TargetGpu[],
    targets: readonly ProcessIdentity[],
    toIdle = false,
  ): Promise<{ released: boolean; waitedMs: number }> {
    const start = this.deps.now().getTime();
    const baseline = new Map<TargetGpu, number>();
    for (const g of gpus) {
      const before = this.ctx.hostGpus.find((x) => sameGpu(x, g));
      baseline.set(g, toIdle || !before ? 0 : (unaccounted(before, this.ctx.hostApps) ?? 0));
    }
    const targetPids = new Set(targets.map((t) => t.hostPid));
    const t = { timeoutMs: this.deps.commandTimeoutMs };
    for (;;) {
      const gr = await this.exec('read_gpus', 'host', queryGpus(t));
      const ar = await this.exec('check_apps', 'host', queryComputeApps(t));
      const g = gr.code === 0 && !gr.timedOut ? parseQueryGpuCsv(gr.stdout, [...GPU_FIELDS]) : null;
      const a = ar.code === 0 && !ar.timedOut ? parseComputeAppsCsv(ar.stdout, [...APP_FIELDS]) : null;
      if (g?.ok && a?.ok && g.value.error === null && a.value.error === null) {
        const apps = a.value.processes;
        const stillListed = apps.some((p) => targetPids.has(p.pid));
        const free = gpus.every((tg) => {
          const now = g.value.gpus.find((x) => sameGpu(x, tg));
          const u = now ? unaccounted(now, apps) : null;
          return u !== null && u <= (baseline.get(tg) ?? 0) + IDLE_MIB;
        });
        if (!stillListed && free) return { released: true, waitedMs: this.deps.now().getTime() - start };
      }
      const waited = this.deps.now().getTime() - start;
      if (waited >= this.step.releaseTimeoutMs) return { released: false, waitedMs: waited };
      await this.deps.sleep(Math.min(this.step.pollIntervalMs, this.step.releaseTimeoutMs - waited));
    }
  }
}
