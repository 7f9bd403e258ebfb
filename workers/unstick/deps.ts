import type { ApprovalStore } from '../../src/approval/approval-store.ts';
import type { BlastBudget } from '../../src/approval/blast-budget.ts';
import type { WorkerKeys } from '../../src/auth/keys.ts';
import type { NonceLedger } from '../../src/auth/nonce-ledger.ts';
import type { Inventory } from '../../src/config/inventory.ts';
import type { IncidentLog } from '../../src/incident/log.ts';
import type { TargetLock } from '../../src/incident/target-lock.ts';
import type { Logger } from '../../src/logger.ts';
import type { StepGuard } from '../../src/step-guard/step-guard.ts';
import type { Dispatcher } from '../../src/queue/dispatcher.ts';
import type { Executor } from '../../src/ssh/types.ts';

/** What the unstick worker's jobs (unstick, decision, expire, remind, escalate) are given. */
export interface UnstickWorkerDeps {
  inventory: Inventory;
  executor: Executor;
  log: IncidentLog;
  approvals: ApprovalStore;
  steps: StepGuard;
  lock: TargetLock;
  /** Schedules the expiry job: enqueue(site, { kind: 'expire', incidentId, approvalId }, jobId, { delayMs }). */
  dispatcher: Dispatcher;
  /**
   * Slack user IDs who may decide host-level steps: frozen into each approval when it is created,
   * and checked again (live) before an approved step runs.
   */
  approvers: string[];
  /**
   * Key of the plan seal (src/plan/plan-seal.ts), held by workers only: an approved step runs
   * only from a plan sealed with it, its commands rebuilt from the templates.
   */
  planKey: Buffer;
  /**
   * So no Redis writer can forge a plan or a click: the worker's Ed25519 key (it signs its plans) and the public keys
   * it verifies with: the bot's (requests and decisions), and its own and previous ones (plans).
   */
  keys: WorkerKeys;
  /** Single use of every signed request and decision (Redis and this process's memory). */
  nonces: NonceLedger;
  /** Slack user IDs who alone may approve a host-level step past the blast-radius budget. */
  admins: string[];
  budget: BlastBudget;
  approvalTtlMs: number;
  /**
   * GPU_MEDIC_ESCALATION_APPROVERS and GPU_MEDIC_ESCALATE_AFTER_SEC: frozen into each approval
   * (never when only an admin may approve it), pinged at that time, and checked again (live) before
   * a step they approved runs. Absent or empty: cards do not escalate.
   */
  escalation?: { approvers: string[]; afterMs: number };
  timing: { graceMs: number; releaseTimeoutMs: number; pollIntervalMs: number; commandTimeoutMs: number };
  now(): Date;
  sleep(ms: number): Promise<void>;
  logger: Logger;
  /** Names this worker (and job attempt) in step claims. */
  workerId: string;
  /**
   * The BullMQ job id (the same for every attempt of a job; `workerId` contains it). Lets a re-run
   * finish a once-only write that an earlier attempt of the same job claimed and died before doing.
   */
  jobId?: string;
  /** How long an attempt's heartbeat lasts unrefreshed (a successor waits this long for a dead one). Default 5 s. */
  aliveMs?: number;
}
