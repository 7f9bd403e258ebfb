/**
 * An approval is never lost, even when its job cannot be queued. The bot stores the decision, then
 * queueing its job fails (Redis refuses the queue write). The card says Approved; the decision is
 * indexed as "not taken up" in the same atomic step, and a worker's sweep queues its job under the
 * bot's own job id, so it runs exactly once. Real fleet, SSH, Redis and BullMQ queue.
 */
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handleApprovalClick } from '../../commands/approval-actions.ts';
import type { CommandDeps } from '../../commands/deps.ts';
import { SnoozeStore } from '../../src/watch-store/snooze-store.ts';
import { CodedError, ErrorCode } from '../../src/errors.ts';
import { createDispatcher, type Dispatcher } from '../../src/queue/dispatcher.ts';
import { JobSchema, queueName } from '../../src/queue/jobs.ts';
import { createSshExecutor } from '../../src/ssh/executor.ts';
import type { Executor } from '../../src/ssh/types.ts';
import { sweepDecisions } from '../../workers/decision-sweep.ts';
import { runDecisionJob, runUnstickJob } from '../../workers/unstick.ts';
import { captureLogger } from '../harness/capture-logger.ts';
import { APPROVER, fleetuserInventory, ofType, startRig, type Rig } from './rig.ts';

let rig: Rig;
let ex: Executor;
let dispatcher: Dispatcher;
let queue: Queue;

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 2 }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
  });
  ex = createSshExecutor({ access: 'root-shell', connectTimeoutMs: 8000 });
  dispatcher = createDispatcher({ connection: rig.redis, prefix: rig.prefix });
  queue = new Queue(queueName('default'), { connection: rig.redis, prefix: rig.prefix });
}, 120_000);

afterAll(async () => {
  await queue?.close();
  await dispatcher?.close();
  await ex?.close();
  await rig?.stop();
}, 60_000);

const asFleetuser = () => fleetuserInventory(rig.fleet);

describe('a decision whose job could not be queued', () => {
  it('is still executed, exactly once: the click says recorded, a retry click says already approved, the sweep queues one job, the kill runs once', async () => {
    const holder = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 30_000 }],
      title: 'sglang::scheduler_TP0',
    });
    const id = await rig.newIncident('ct129');
    await runUnstickJob(
      { kind: 'unstick', incidentId: id, machineId: 'ct129' },
      rig.deps({ inventory: asFleetuser(), executor: ex }),
    );
    const req = ofType(await rig.events(id), 'approval_requested')[0];
    if (!req) throw new Error('no card');
    const cardTs = '1796000000.000100';
    await rig.log.setSlackRef(id, `approval:${req.approvalId}`, { ts: cardTs, hash: 'x' });

    const refused: string[] = [];
    const { logger, text } = captureLogger('lost-decision-bot');
    const botDeps: CommandDeps = {
      inventory: rig.inventory,
      log: rig.log,
      // Redis refuses the queue write (what the dispatcher reports when it cannot add the job).
      dispatcher: {
        async enqueue(_site, _data, jobId) {
          refused.push(jobId);
          throw new CodedError(
            ErrorCode.QueueUnavailable,
            "queue unavailable: READONLY You can't write against a read only replica.",
          );
        },
        async enqueueAll(jobs) {
          refused.push(...jobs.map((j) => j.jobId));
          throw new CodedError(
            ErrorCode.QueueUnavailable,
            "queue unavailable: READONLY You can't write against a read only replica.",
          );
        },
        async close() {},
      },
      policy: { allowedChannels: [], allowedUsers: [], approvers: [APPROVER] },
      now: () => new Date(),
      newIncidentId: () => 'inc_unused',
      logger,
      lock: rig.lock,
      approvals: rig.approvals,
      lockTtlMs: 60_000,
      alertsChannel: null,
      snoozes: new SnoozeStore(rig.redis, rig.prefix),
      signer: rig.signer,
    };
    const click = () =>
      handleApprovalClick(
        { approvalId: req.approvalId, decision: 'approved', user: APPROVER, channel: 'C0ONCALL01', messageTs: cardTs },
        botDeps,
      );
    expect(await click()).toMatch(/^:white_check_mark: Approved and recorded\..*picks it up on its own/);
    expect(text()).toMatch(/its job not queued/);
    expect((await rig.approvals.get(req.approvalId))?.state).toBe('approved');
    const jobId = `${id}-decision-${req.approvalId}`;
    expect(await queue.getJob(jobId)).toBeUndefined();
    // A retry: already approved, and the bot tries the queue once more (still refused).
    expect(await click()).toMatch(/Already approved/);
    expect(refused).toEqual([jobId, jobId]);

    // A worker's sweep, twice (the bot's grace passed): one job, under the bot's job id.
    const sweep = () =>
      sweepDecisions({
        approvals: rig.approvals,
        log: rig.log,
        inventory: rig.inventory,
        dispatcher,
        now: () => new Date(),
        logger,
        graceMs: 0,
      });
    expect(await sweep()).toBe(1);
    await sweep();
    const jobs = await queue.getJobs(['waiting', 'delayed', 'active', 'completed', 'failed']);
    expect(jobs.filter((j) => j.name === 'decision').map((j) => j.id)).toEqual([jobId]);

    // The worker runs it (as BullMQ would hand it over): the approved kill, once.
    const data = JobSchema.parse(jobs.find((j) => j.id === jobId)?.data);
    if (data.kind !== 'decision') throw new Error('not a decision job');
    await runDecisionJob(data, rig.deps({ inventory: asFleetuser(), executor: ex, jobId, workerId: `h:1:${jobId}:1` }));
    expect(
      rig.fleet
        .signals()
        .filter((s) => s.hostPid === holder.hostPid)
        .map((s) => s.signal),
    ).toEqual(['SIGKILL']);
    const ev = await rig.events(id);
    expect(ofType(ev, 'verdict').at(-1)?.verdict.kind).toBe('recovered');
    expect(ofType(ev, 'approval_decided')).toHaveLength(1);
    // Taken up: the sweep never queues it again.
    expect(await sweep()).toBe(0);
    expect(await rig.approvals.isUndispatched(req.approvalId)).toBe(false);
    expect(await rig.lock.holder('ct129')).toBeNull();
  }, 90_000);
});
