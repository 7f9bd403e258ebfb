import type { DecideRefusalCode } from '../approval/approval-policy.ts';
import type { StoreRefusalCode } from '../approval/approval-store.ts';
import type { Diagnosis } from '../gpu/diagnose.ts';
import type { Verdict } from '../gpu/verdict.ts';
import type { CommandRole, Step, StepKind, Tier } from '../plan/unstick-plan.ts';
import type { StepOutcome } from '../plan/unstick-plan.ts';
import type { CommandRecord, IncidentEvent } from './events.ts';

/**
 * Events the unstick flow appends to the incident log, beside those of events.ts (`requested`,
 * `started`, `snapshot` with label before/after, `machine_error`, `error`, `finished`), which
 * it reuses as they are. Every payload is plain JSON: the log is the record, the thread a view.
 */
export type UnstickEvent =
  | { type: 'diagnosis'; at: string; label: 'before' | 'after'; diagnosis: Diagnosis }
  | {
      type: 'step_started';
      at: string;
      stepId: string;
      kind: StepKind;
      tier: Tier;
      machineId: string;
      explanation: string;
    }
  /** One command a step ran; `record.command` is the literal line sent over SSH. */
  | { type: 'command'; at: string; stepId: string; role: CommandRole; on: 'container' | 'host'; record: CommandRecord }
  /**
   * Written before a signal command is sent: if the worker dies, or the answer is lost, after the
   * signal went out but before `signalled` is written, the log still says which identities it was
   * sent to, so no thread can claim "nothing was signalled" of a signal that went out unrecorded.
   */
  | {
      type: 'signal_intent';
      at: string;
      stepId: string;
      on: 'container' | 'host';
      signal: 'TERM' | 'KILL';
      targets: Array<{ hostPid: number; containerPid: number; startTimeTicks: number; cmdline: string }>;
    }
  | {
      type: 'signalled';
      at: string;
      stepId: string;
      hostPid: number;
      containerPid: number;
      /** The start time the identity was checked against at the moment of the signal. */
      startTimeTicks?: number;
      /** `pidfd`: checked and signalled as one race-free act; `shell`: checked then killed in one shell (not race-free). */
      check?: 'pidfd' | 'shell';
      signal: 'TERM' | 'KILL';
      cmdline: string;
      /** `sent`: signal delivered; `gone`: exited before it; `skipped`: not signalled (see `refusedBy`). */
      result: 'sent' | 'gone' | 'skipped';
      reason: string | null;
      /**
       * Why a `skipped` was not signalled: gpu-medic's re-check refused it, the kernel did
       * (`not_permitted`: EPERM), or the signal command failed otherwise. Absent in older logs.
       */
      refusedBy?: 'recheck' | 'not_permitted' | 'failed';
    }
  | {
      type: 'step_finished';
      at: string;
      stepId: string;
      /** `interrupted`: a previous attempt claimed the step and never finished it; nothing was re-run. */
      outcome: StepOutcome | 'interrupted';
      durationMs: number;
      message: string;
    }
  | {
      type: 'approval_requested';
      at: string;
      approvalId: string;
      stepId: string;
      expiresAt: string;
      planHash: string;
      step: Step;
      host: string;
      vmid: number;
      /** Who was frozen in as deciders (absent in logs from before it was recorded). */
      approvers?: string[];
      /** The escalation group frozen into the approval and when they may decide too; absent: none. */
      escalation?: { approvers: string[]; at: string };
      /**
       * The plan as the worker signed it (src/plan/plan-seal.ts): the bot checks the signature
       * and draws the card from it alone (src/slack/card-plans.ts). Absent in older logs.
       */
      seal?: { body: string; sig: string };
      /** Set by the bot only (src/slack/card-plans.ts): why the card's plan was not verified; nothing of it is shown. */
      unverified?: string;
    }
  | {
      type: 'approval_decided';
      at: string;
      approvalId: string;
      stepId: string;
      decision: 'approved' | 'denied';
      by: string;
      /** The decider's Slack user name from the click (`user.username`); absent in older logs. */
      name?: string;
    }
  | { type: 'approval_expired'; at: string; approvalId: string; stepId: string }
  /** Half the card's time to live passed undecided: `pinged` were mentioned again in the thread. */
  | { type: 'approval_reminded'; at: string; approvalId: string; stepId: string; pinged: string[]; expiresAt: string }
  /** The card waited GPU_MEDIC_ESCALATE_AFTER_SEC undecided: the escalation group (`pinged`) was mentioned and may decide too from now on. */
  | { type: 'approval_escalated'; at: string; approvalId: string; stepId: string; pinged: string[]; expiresAt: string }
  | {
      type: 'approval_refused';
      at: string;
      approvalId: string;
      by: string;
      /** The clicker's Slack user name from the click; absent in older logs. */
      name?: string;
      reason: DecideRefusalCode | StoreRefusalCode;
    }
  | { type: 'verdict'; at: string; verdict: Verdict };

/** What an unstick thread is rendered from, before the unions are merged in events.ts. */
export type UnstickLoggedEvent = (IncidentEvent | UnstickEvent) & { id: string };
