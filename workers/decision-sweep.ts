import type { ApprovalStore } from '../src/approval/approval-store.ts';
import type { Inventory } from '../src/config/inventory.ts';
import { findMachine } from '../src/config/machines.ts';
import type { IncidentLog } from '../src/incident/log.ts';
import type { Logger } from '../src/logger.ts';
import type { Dispatcher } from '../src/queue/dispatcher.ts';
import { decisionJobId } from '../src/queue/jobs.ts';

export interface DecisionSweepDeps {
  approvals: ApprovalStore;
  log: IncidentLog;
  inventory: Inventory;
  dispatcher: Dispatcher;
  now(): Date;
  logger: Logger;
  /** A decision younger than this is left to the bot, which queues its job right after storing it. */
  graceMs: number;
}

/**
 * Queues the decision job of every decision no worker has taken up (the bot stored the decision
 * and then could not queue its job: Redis refused the write, the bot died in between). Under the
 * same fixed job id as the bot's, so a job that exists already is not queued twice; the decision
 * job takes itself out of the index when it starts. Returns how many were queued.
 */
export async function sweepDecisions(d: DecisionSweepDeps): Promise<number> {
  let queued = 0;
  for (const id of await d.approvals.undispatched(d.now().getTime() - d.graceMs)) {
    const a = await d.approvals.get(id);
    if (!a || (a.state !== 'approved' && a.state !== 'denied')) {
      await d.approvals.dispatched(id);
      continue;
    }
    const meta = await d.log.meta(a.incidentId);
    const site = findMachine(d.inventory, meta?.targets[0] ?? '')?.site;
    // Another site's worker group (with its own inventory) queues it; no incident record: nothing to run it for.
    if (!meta || site === undefined) continue;
    try {
      await d.dispatcher.enqueue(
        site,
        { kind: 'decision', incidentId: a.incidentId, approvalId: id },
        decisionJobId(a.incidentId, id),
      );
      queued++;
      d.logger.info({ approvalId: id, incident: a.incidentId }, 'queued the job of a decision no worker had taken up');
    } catch (err) {
      d.logger.warn({ err, approvalId: id }, 'could not queue a decision job (will try again)');
    }
  }
  return queued;
}
