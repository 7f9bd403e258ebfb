/**
 * The bot signs a decision only after its policy accepted the click (src/approval/approval-store.ts):
 * the requester's own click, a bystander's, a click after Deny and a click after expiry leave no
 * signed text anywhere: not on the wire to Redis (seen with MONITOR, as a Redis reader would), not in
 * Redis, not in the bot's log. The twin, an approver's click, is signed, and the same three places
 * show it, so the watch itself can see a signature when there is one.
 */
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handleApprovalClick } from '../../commands/approval-actions.ts';
import type { CommandDeps } from '../../commands/deps.ts';
import { ApprovalStore } from '../../src/approval/approval-store.ts';
import { newKeyPair } from '../../src/auth/keys.ts';
import { botSigner } from '../../src/auth/signed-jobs.ts';
import { validateInventory } from '../../src/config/load-inventory.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { TargetLock } from '../../src/incident/target-lock.ts';
import { createDispatcher } from '../../src/queue/dispatcher.ts';
import { SnoozeStore } from '../../src/watch-store/snooze-store.ts';

const REQ = 'U0REQUEST1';
const APPROVER = 'U0APPROVE1';
const APPROVER2 = 'U0APPROVE2';
const BYSTANDER = 'U0BYSTAND1';
const CH = 'C0ONCALL01';
const TS = '1796000000.000100';
/** What every signed decision's text starts with (src/auth/envelope.ts). */
const SIGNED = 'gpu-medic decision v2';

describe('a refused click is never signed', () => {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  const prefix = `t${randomBytes(4).toString('hex')}`;
  const clock = Date.parse('2026-12-06T03:00:00Z');
  let now = clock;
  const logged: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      logged.push(chunk.toString('utf8'));
      done();
    },
  });
  const inv = validateInventory({
    defaults: { keyFile: '/k' },
    hosts: [{ id: 'kpro5', address: '10.0.0.6', hostKeys: [`SHA256:${'B'.repeat(43)}`] }],
    containers: [{ id: 'ct129', vmid: 129, host: 'kpro5' }],
  }).inventory;
  if (!inv) throw new Error('inventory');
  const log = new IncidentLog(redis, prefix);
  const approvals = new ApprovalStore(redis, prefix, { signer: botSigner(newKeyPair().privateKey) });
  const dispatcher = createDispatcher({ connection: redis, prefix });
  const deps: CommandDeps = {
    inventory: inv,
    log,
    dispatcher,
    policy: { allowedChannels: [], allowedUsers: [], approvers: [APPROVER, APPROVER2] },
    now: () => new Date(now),
    newIncidentId: () => `inc_test_${prefix}`,
    logger: pino({ level: 'debug' }, sink),
    lock: new TargetLock(redis, prefix),
    approvals,
    lockTtlMs: 60_000,
    alertsChannel: null,
    snoozes: new SnoozeStore(redis, prefix),
    signer: botSigner(newKeyPair().privateKey),
  };
  let monitor: Redis;
  const wire: string[] = [];

  async function card(expiresAt = clock + 15 * 60_000): Promise<string> {
    const incidentId = `inc_test_${prefix}_${randomBytes(3).toString('hex')}`;
    await log.create({
      id: incidentId,
      kind: 'unstick',
      requester: REQ,
      channel: CH,
      targets: ['ct129'],
      text: 'unstick ct129',
      reason: null,
      createdAt: new Date(clock).toISOString(),
    });
    const a = await approvals.create({
      incidentId,
      stepId: 'host_kill-abc',
      planHash: 'h1',
      requester: REQ,
      approvers: [APPROVER, APPROVER2],
      now: clock,
      expiresAt,
    });
    await log.setSlackRef(incidentId, `approval:${a.id}`, { ts: TS, hash: 'x' });
    return a.id;
  }

  const click = (approvalId: string, user: string, decision: 'approved' | 'denied' = 'approved') =>
    handleApprovalClick({ approvalId, decision, user, channel: CH, messageTs: TS }, deps);

  /** Every hash field of every key under the prefix. */
  async function stored(): Promise<string> {
    const keys = await redis.keys(`${prefix}:*`);
    const out: string[] = [];
    for (const k of keys) if ((await redis.type(k)) === 'hash') out.push(JSON.stringify(await redis.hgetall(k)));
    return out.join('\n');
  }

  /** Runs `fn` and returns what reached Redis's wire and the log meanwhile. */
  async function watched(fn: () => Promise<string>) {
    const w0 = wire.length;
    const l0 = logged.length;
    const answer = await fn();
    await redis.ping();
    await new Promise((r) => setTimeout(r, 50));
    return { answer, wire: wire.slice(w0).join('\n'), log: logged.slice(l0).join('') };
  }

  beforeAll(async () => {
    monitor = await redis.duplicate().monitor();
    monitor.on('monitor', (_time: string, args: string[]) => wire.push(args.join(' ')));
  });

  afterAll(async () => {
    monitor.disconnect();
    await dispatcher.close();
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });

  it("the requester's own Approve, a bystander's, and an Approve after expiry: refused, no signed text on the wire, in Redis or in the log", async () => {
    const id = await card();
    for (const user of [REQ, BYSTANDER]) {
      const w = await watched(() => click(id, user));
      expect(w.answer).toMatch(/Nothing was run/);
      expect(w.wire).toContain(id);
      expect(w.wire).not.toContain(SIGNED);
      expect(w.log).not.toContain(SIGNED);
    }
    const late = await card(clock + 60_000);
    now = clock + 61_000;
    try {
      const w = await watched(() => click(late, APPROVER));
      expect(w.answer).toMatch(/expired/);
      expect(w.wire).not.toContain(SIGNED);
      expect(w.log).not.toContain(SIGNED);
    } finally {
      now = clock;
    }
    expect(await stored()).not.toContain(SIGNED);
  });

  it("an approver's Approve is signed (the watch sees it); a second approver's Approve after it, and an Approve after a Deny, are not", async () => {
    const id = await card();
    const w = await watched(() => click(id, APPROVER));
    expect(w.answer).toMatch(/^:white_check_mark: Approved/);
    expect(w.wire).toContain(SIGNED);
    const a = await approvals.get(id);
    expect(a?.signedDecision?.body).toContain(`\ndecider=${APPROVER}\n`);
    const again = await watched(() => click(id, APPROVER2));
    expect(again.answer).toMatch(/Already approved/);
    expect(again.wire).not.toContain(SIGNED);

    const denied = await card();
    const d = await watched(() => click(denied, APPROVER, 'denied'));
    expect(d.wire).toContain(`${SIGNED}`);
    expect(d.wire).toContain('decision=denied');
    const after = await watched(() => click(denied, APPROVER2, 'approved'));
    expect(after.answer).toMatch(/Already denied/);
    expect(after.wire).not.toContain(SIGNED);
    expect((await approvals.get(denied))?.signedDecision?.body).toContain('\ndecision=denied\n');
  });
});
