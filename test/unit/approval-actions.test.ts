import { randomBytes } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { newKeyPair } from '../../src/auth/keys.ts';
import { botSigner } from '../../src/auth/signed-jobs.ts';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handleApprovalClick } from '../../commands/approval-actions.ts';
import { SnoozeStore } from '../../src/watch-store/snooze-store.ts';
import type { CommandDeps } from '../../commands/deps.ts';
import { unstickCommand } from '../../commands/unstick.ts';
import { ApprovalStore } from '../../src/approval/approval-store.ts';
import { validateInventory } from '../../src/config/load-inventory.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { TargetLock } from '../../src/incident/target-lock.ts';
import { createDispatcher } from '../../src/queue/dispatcher.ts';
import { queueName } from '../../src/queue/jobs.ts';

const FP = `SHA256:${'B'.repeat(43)}`;
const REQ = 'U0REQUEST1';
const APPROVER = 'U0APPROVE1';
const OTHER = 'U0RANDOM01';
const ESCAL = 'U0ESCALAT1';
const CH = 'C0ONCALL01';

describe('unstick command and approval clicks (real Redis, real BullMQ queue)', () => {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  const prefix = `t${randomBytes(4).toString('hex')}`;
  let clock = Date.parse('2026-11-30T03:00:00Z');
  let n = 0;
  const inv = validateInventory({
    defaults: { keyFile: '/k' },
    hosts: [{ id: 'kpro5', address: '10.0.0.6', hostKeys: [FP] }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5' }],
  }).inventory;
  if (!inv) throw new Error('inventory');
  const log = new IncidentLog(redis, prefix);
  const approvals = new ApprovalStore(redis, prefix);
  const dispatcher = createDispatcher({ connection: redis, prefix });
  const deps: CommandDeps = {
    inventory: inv,
    log,
    dispatcher,
    policy: { allowedChannels: [], allowedUsers: [], approvers: [APPROVER], escalationApprovers: [ESCAL] },
    now: () => new Date(clock),
    newIncidentId: () => `inc_test_${prefix.toLowerCase()}_${++n}`,
    logger: pino({ level: 'silent' }),
    lock: new TargetLock(redis, prefix),
    approvals,
    lockTtlMs: 60_000,
    alertsChannel: null,
    snoozes: new SnoozeStore(redis, prefix),
    signer: botSigner(newKeyPair().privateKey),
  };
  const queue = new Queue(queueName('default'), { connection: redis, prefix });

  afterAll(async () => {
    await queue.close();
    await dispatcher.close();
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });

  let incidentId = '';
  let approvalId = '';
  beforeAll(async () => {
    const ack = await unstickCommand(
      'ct129',
      'hung TP ranks',
      { text: 'unstick ct129 hung TP ranks', userId: REQ, userName: 'alice', channelId: CH },
      deps,
    );
    incidentId = /incident `(inc_[a-z0-9_]+)`/.exec(ack)?.[1] ?? '';
    expect(incidentId).not.toBe('');
    const a = await approvals.create({
      incidentId,
      stepId: 'host_kill-abc',
      planHash: 'h1',
      requester: REQ,
      approvers: [APPROVER],
      now: clock,
      expiresAt: clock + 15 * 60_000,
    });
    approvalId = a.id;
    await log.setSlackRef(incidentId, `approval:${a.id}`, { ts: '1796000000.000100', hash: 'x' });
  });

  /** The Slack user name each clicker's payload carries (`user.username`). */
  const NAMES: Record<string, string> = { [REQ]: 'alice', [APPROVER]: 'bob', [OTHER]: 'carol' };
  const click = (
    user: string,
    o: Partial<{ ts: string; channel: string; id: string; decision: 'approved' | 'denied' }> = {},
  ) =>
    handleApprovalClick(
      {
        approvalId: o.id ?? approvalId,
        decision: o.decision ?? 'approved',
        user,
        ...(NAMES[user] ? { userName: NAMES[user] } : {}),
        channel: o.channel ?? CH,
        messageTs: o.ts ?? '1796000000.000100',
      },
      deps,
    );

  it('queues the unstick job and holds the lock: a second unstick is told who holds it', async () => {
    expect(await queue.getJob(`${incidentId}-unstick`)).toBeTruthy();
    const second = await unstickCommand('ct129', null, { text: 'unstick ct129', userId: OTHER, channelId: CH }, deps);
    expect(second).toContain(`incident \`${incidentId}\``);
    expect(second).toContain(`<@${REQ}>`);
    expect(second).toContain('Nothing was done');
    expect(await queue.getJobCounts('waiting')).toMatchObject({ waiting: 1 });
  });

  it('refuses a host as unstick target and an unknown container with a suggestion', async () => {
    expect(await unstickCommand('kpro5', null, { text: '', userId: REQ, channelId: CH }, deps)).toMatch(
      /is a Proxmox host.*Nothing was done/,
    );
    // A destructive command proposes only a near-certain typo: ct12 and ct999 name other containers.
    for (const t of ['ct12', 'ct999']) {
      const answer = await unstickCommand(t, null, { text: '', userId: REQ, channelId: CH }, deps);
      expect(answer).not.toMatch(/did you mean/);
      expect(answer).toMatch(/Nothing was done/);
    }
    expect(await unstickCommand('CT129', null, { text: '', userId: REQ, channelId: CH }, deps)).toMatch(
      /did you mean `ct129`\?.*Nothing was done/,
    );
  });

  it('refuses the requester, a non-approver, a forged id and a click from another message; records each; queues nothing', async () => {
    expect(await click(REQ)).toMatch(/second person must. Nothing was run/);
    expect(await click(OTHER)).toMatch(/not on the approvers list/);
    expect(await click(APPROVER, { id: 'apr_forgedforgedforgedforged' })).toMatch(/does not exist/);
    expect(await click(APPROVER, { ts: '1796000000.999999' })).toMatch(/does not belong/);
    expect(await click(APPROVER, { channel: 'C0ELSEWHERE' })).toMatch(/does not belong/);
    const refused = (await log.events(incidentId)).filter((e) => e.type === 'approval_refused');
    expect(refused.map((e) => (e.type === 'approval_refused' ? [e.by, e.reason] : []))).toEqual([
      [REQ, 'self_approval'],
      [OTHER, 'not_approver'],
      [APPROVER, 'approval_not_found'],
      [APPROVER, 'approval_not_found'],
    ]);
    expect(await queue.getJob(`${incidentId}-decision-${approvalId}`)).toBeFalsy();
    expect((await approvals.get(approvalId))?.state).toBe('pending');
  });

  it('the first approver decision wins; a double click queues one job and tells who decided', async () => {
    const [a, b] = await Promise.all([click(APPROVER), click(APPROVER, { decision: 'denied' })]);
    const texts = [a, b].sort();
    expect(texts.filter((t) => /^:white_check_mark: Approved|^:x: Denied/.test(t))).toHaveLength(1);
    expect(texts.filter((t) => t.includes('Already'))).toHaveLength(1);
    expect(texts.find((t) => t.includes('Already'))).toContain(`<@${APPROVER}>`);
    const jobs = await queue.getJobs(['waiting', 'delayed', 'active']);
    expect(jobs.filter((j) => j.data.kind === 'decision')).toHaveLength(1);
    expect((await log.events(incidentId)).filter((e) => e.type === 'approval_decided')).toHaveLength(1);
  });

  it("records the Slack user name where a person acts: the requester's on the request, the decider's on the decision, the clicker's on a refusal", async () => {
    const events = await log.events(incidentId);
    expect(events.find((e) => e.type === 'requested')).toMatchObject({ type: 'requested', name: 'alice' });
    expect(events.find((e) => e.type === 'approval_decided')).toMatchObject({ by: APPROVER, name: 'bob' });
    expect(events.find((e) => e.type === 'approval_refused')).toMatchObject({ by: REQ, name: 'alice' });
  });

  it('a click after expiry is refused and runs nothing', async () => {
    const a = await approvals.create({
      incidentId,
      stepId: 'host_reset-x',
      planHash: 'h2',
      requester: REQ,
      approvers: [APPROVER],
      now: clock,
      expiresAt: clock + 60_000,
    });
    await log.setSlackRef(incidentId, `approval:${a.id}`, { ts: '1796000000.000200', hash: 'y' });
    clock += 61_000;
    expect(await click(APPROVER, { id: a.id, ts: '1796000000.000200' })).toMatch(/expired at .*Nothing was run/);
    expect(await queue.getJob(`${incidentId}-decision-${a.id}`)).toBeFalsy();
  });

  it('an escalation approver is told when they may decide before the escalation time, and decides after it', async () => {
    const at = clock + 5 * 60_000;
    const a = await approvals.create({
      incidentId,
      stepId: 'host_kill-esc',
      planHash: 'h3',
      requester: REQ,
      approvers: [APPROVER],
      now: clock,
      expiresAt: clock + 15 * 60_000,
      escalation: { approvers: [ESCAL], at },
    });
    await log.setSlackRef(incidentId, `approval:${a.id}`, { ts: '1796000000.000300', hash: 'z' });
    const early = await click(ESCAL, { id: a.id, ts: '1796000000.000300' });
    expect(early).toContain(`may decide it from ${new Date(at).toISOString().slice(11, 16)} UTC on`);
    expect(early).toMatch(/Nothing was run/);
    const refused = (await log.events(incidentId)).filter(
      (e) => e.type === 'approval_refused' && e.approvalId === a.id,
    );
    expect(refused.map((e) => (e.type === 'approval_refused' ? [e.by, e.reason] : []))).toEqual([
      [ESCAL, 'escalation_not_due'],
    ]);
    expect(await queue.getJob(`${incidentId}-decision-${a.id}`)).toBeFalsy();
    clock = at;
    expect(await click(ESCAL, { id: a.id, ts: '1796000000.000300' })).toMatch(/^:white_check_mark: Approved/);
    expect(await queue.getJob(`${incidentId}-decision-${a.id}`)).toBeTruthy();
  });
});
