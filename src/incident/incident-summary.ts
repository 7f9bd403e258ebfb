/**
 * One incident in short, from its meta and events alone: what ran (steps, signals, approvals),
 * how it ended (verdict, memory freed), and for a watchdog alert what it said. Pure; the history
 * answer (src/render/history.ts) and the Markdown post-mortem (src/render/incident-markdown.ts)
 * are rendered from it. Text in it is data (machine or user text), escaped where it is rendered.
 */
import type { Verdict } from '../gpu/verdict.ts';
import type { StepKind, Tier } from '../plan/unstick-plan.ts';
import type { AlertEvent } from '../watchdog/alert-events.ts';
import type { Alert } from '../watchdog/judge.ts';
import type { AnyLoggedEvent } from './all-events.ts';
import type { IncidentMeta } from './events.ts';
import { signalOutcome } from './signal-outcome.ts';
import { incidentState } from './timeline.ts';

export interface StepSummary {
  stepId: string;
  kind: StepKind;
  tier: Tier;
  /** Inventory id the step ran (or would run) on. */
  machineId: string;
  /** Signals delivered (result `sent`). */
  sent: { TERM: number; KILL: number };
  /** Targets that had exited before the signal. */
  gone: number;
  /** Targets the re-check refused (not signalled). */
  skipped: number;
  /** Targets the kernel refused the signal to (EPERM), or whose signal failed otherwise. */
  notPermitted: number;
  failed: number;
  /** The approval of a tier-2 step: `pending` while nobody decided; null for tier 1. */
  approval: { state: 'approved' | 'denied' | 'expired' | 'pending'; by: string | null } | null;
  /** How it ended (`step_finished`), null while it has not. */
  outcome: string | null;
}

export interface AlertSummary {
  kind: Alert['kind'];
  machineId: string;
  gpu: number | null;
  /** What it said last. */
  sentence: string;
  raisedAt: string | null;
  clearedAt: string | null;
  snoozes: Array<{ by: string; scope: string; until: string }>;
  /** Clicks on its buttons: the incident each opened, or why it was refused; `target`: the machine acted on. */
  actions: Array<Omit<Extract<AlertEvent, { type: 'alert_action' }>, 'type' | 'at'>>;
}

export interface IncidentSummary {
  meta: IncidentMeta;
  /** `finished`'s time, null while it has not. */
  endedAt: string | null;
  durationMs: number | null;
  finishedOutcome: 'ok' | 'partial' | 'failed' | null;
  /** How it ended in words (timeline.ts `incidentState`): "Recovered (finished ok)", "waiting for approval …". */
  state: string;
  steps: StepSummary[];
  verdict: Verdict | null;
  /** Everyone who approved a step, in order, once each. */
  approvers: string[];
  machineErrors: Array<{ machineId: string; code: string; message: string }>;
  error: { code: string; message: string } | null;
  doctor: { failed: number; warned: number } | null;
  alert: AlertSummary | null;
}

export function summarizeIncident(meta: IncidentMeta, events: readonly AnyLoggedEvent[]): IncidentSummary {
  const steps = new Map<string, StepSummary>();
  const approvalStep = new Map<string, string>();
  const step = (id: string, kind: StepKind, tier: Tier, machineId: string): StepSummary => {
    const have = steps.get(id);
    if (have) return have;
    const s: StepSummary = {
      stepId: id,
      kind,
      tier,
      machineId,
      sent: { TERM: 0, KILL: 0 },
      gone: 0,
      skipped: 0,
      notPermitted: 0,
      failed: 0,
      approval: tier === 2 ? { state: 'pending', by: null } : null,
      outcome: null,
    };
    steps.set(id, s);
    return s;
  };
  const out: IncidentSummary = {
    meta,
    endedAt: null,
    durationMs: null,
    finishedOutcome: null,
    state: incidentState(meta, events),
    steps: [],
    verdict: null,
    approvers: [],
    machineErrors: [],
    error: null,
    doctor: null,
    alert: null,
  };
  const alertOf = (a: Alert): AlertSummary => {
    out.alert ??= {
      kind: a.kind,
      machineId: a.machineId,
      gpu: a.gpu,
      sentence: a.sentence,
      raisedAt: null,
      clearedAt: null,
      snoozes: [],
      actions: [],
    };
    out.alert.sentence = a.sentence;
    return out.alert;
  };
  for (const e of events) {
    switch (e.type) {
      case 'step_started':
        step(e.stepId, e.kind, e.tier, e.machineId);
        break;
      case 'approval_requested': {
        const s = step(e.stepId, e.step.kind, e.step.tier, e.step.machineId);
        s.approval ??= { state: 'pending', by: null };
        approvalStep.set(e.approvalId, e.stepId);
        break;
      }
      case 'approval_decided': {
        const s = steps.get(approvalStep.get(e.approvalId) ?? e.stepId);
        if (s) s.approval = { state: e.decision, by: e.by };
        if (e.decision === 'approved' && !out.approvers.includes(e.by)) out.approvers.push(e.by);
        break;
      }
      case 'approval_expired': {
        const s = steps.get(approvalStep.get(e.approvalId) ?? e.stepId);
        if (s && s.approval?.state === 'pending') s.approval = { state: 'expired', by: null };
        break;
      }
      case 'signalled': {
        const s = steps.get(e.stepId);
        if (!s) break;
        const o = signalOutcome(e);
        if (o === 'sent') s.sent[e.signal] += 1;
        else if (o === 'gone') s.gone += 1;
        else if (o === 'not_permitted') s.notPermitted += 1;
        else if (o === 'failed') s.failed += 1;
        else s.skipped += 1;
        break;
      }
      case 'step_finished': {
        const s = steps.get(e.stepId);
        if (s) s.outcome = e.outcome;
        break;
      }
      case 'verdict':
        out.verdict = e.verdict;
        break;
      case 'finished':
        out.endedAt = e.at;
        out.durationMs = e.durationMs;
        out.finishedOutcome = e.outcome;
        break;
      case 'machine_error':
        out.machineErrors.push({ machineId: e.machineId, code: e.code, message: e.message });
        break;
      case 'error':
        out.error = { code: e.code, message: e.message };
        break;
      case 'doctor_report':
        out.doctor = { failed: e.failed, warned: e.warned };
        break;
      case 'alert_raised':
        alertOf(e.alert).raisedAt ??= e.at;
        break;
      case 'alert_updated':
        alertOf(e.alert);
        break;
      case 'alert_cleared':
        alertOf(e.alert).clearedAt = e.at;
        break;
      case 'alert_snoozed':
        out.alert?.snoozes.push({ by: e.by, scope: e.scope, until: e.until });
        break;
      case 'alert_action':
        out.alert?.actions.push({
          by: e.by,
          action: e.action,
          incidentId: e.incidentId,
          refused: e.refused,
          ...(e.target !== undefined ? { target: e.target } : {}),
        });
        break;
      default:
        break;
    }
  }
  out.steps = [...steps.values()];
  return out;
}

/** When an alert's end is not a `finished` event: cleared is its end. */
export function endOf(s: IncidentSummary): string | null {
  return s.endedAt ?? s.alert?.clearedAt ?? null;
}
