import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MachineSnapshot } from '../../src/gpu/snapshot.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { createSlackApp } from '../../src/slack/app.ts';
import { Outbox } from '../../src/slack/outbox.ts';
import { RequestsInFlight } from '../../src/slack/requests-in-flight.ts';
import { newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';
import { startFakeSlack, type FakeSlack } from '../harness/slack/fake-slack-api.ts';

const CH = 'C0ONCALL01';

function snapshot(): MachineSnapshot {
  return {
    machineId: 'kpro5',
    view: 'host',
    takenAt: '2026-11-30T03:00:01.000Z',
    gpus: [
      {
        index: 0,
        name: 'NVIDIA H200',
        busId: '00000000:01:00.0',
        uuid: 'GPU-1',
        memoryUsedMiB: 96413,
        memoryTotalMiB: 143771,
        utilizationPct: 0,
      },
    ],
    processes: [
      { gpuIndex: 0, gpuUuid: 'GPU-1', pid: 812345, type: null, name: 'sglang::scheduler_TP0', usedMiB: 96413 },
    ],
    holders: [],
    kernelMounts: [],
    ram: { totalBytes: 449 * 1024 ** 3, usedBytes: 40 * 1024 ** 3, availableBytes: null },
    gpuError: null,
  };
}

describe('outbox (real Redis, real WebClient, fake Slack)', () => {
  const redis = newRedis();
  const prefix = randomPrefix('outbox');
  const log = new IncidentLog(redis, prefix);
  let slack: FakeSlack;
  let outbox: Outbox;
  beforeAll(async () => {
    slack = await startFakeSlack();
    const app = createSlackApp({
      mode: 'http',
      botToken: slack.botToken,
      signingSecret: 'x'.repeat(32),
      apiUrl: slack.apiUrl,
      port: 0,
      logger: pino({ level: 'silent' }),
    });
    outbox = new Outbox({ log, poster: app.poster, logger: pino({ level: 'silent' }) });
  });
  afterAll(async () => {
    await slack.close();
    await removePrefix(redis, prefix);
    redis.disconnect();
  });

  it('a thread first rendered after its results are in opens as "requested" and says "done" only after the reply', async () => {
    const id = 'inc_20261130_030000_outbox01';
    await log.create({
      id,
      kind: 'status',
      requester: 'U0REQUEST1',
      channel: CH,
      targets: ['kpro5'],
      text: 'status kpro5',
      reason: null,
      createdAt: '2026-11-30T03:00:00.000Z',
    });
    await log.append(id, { type: 'requested', at: '2026-11-30T03:00:00.000Z' });
    await log.append(id, {
      type: 'snapshot',
      at: '2026-11-30T03:00:01.000Z',
      label: 'status',
      snapshot: snapshot(),
      commands: [],
    });
    await outbox.sync(id);
    const calls = slack.calls().filter((c) => c.status === 200 && c.method.startsWith('chat.'));
    expect(calls.map((c) => c.method)).toEqual(['chat.postMessage', 'chat.postMessage', 'chat.update']);
    expect(String(calls[0]?.body.text)).not.toContain('done');
    expect(calls[1]?.body.thread_ts).toBeDefined();
    expect(String(calls[2]?.body.text)).toContain('done');
    // Idempotent: syncing again changes nothing.
    await outbox.sync(id);
    expect(slack.calls().filter((c) => c.status === 200 && c.method.startsWith('chat.'))).toHaveLength(3);
    expect(await redis.sismember(`${prefix}:dirty`, id)).toBe(0);
  });

  it('while a Slack request is being answered the outbox posts nothing; once it is answered the thread is posted', async () => {
    const id = 'inc_20261130_030000_outbox0a';
    await log.create({
      id,
      kind: 'status',
      requester: 'U0REQUEST1',
      channel: CH,
      targets: ['kpro5'],
      text: 'status kpro5',
      reason: null,
      createdAt: '2026-11-30T03:00:00.000Z',
    });
    await log.append(id, { type: 'requested', at: '2026-11-30T03:00:00.000Z' });
    const requests = new RequestsInFlight();
    const app = createSlackApp({
      mode: 'http',
      botToken: slack.botToken,
      signingSecret: 'x'.repeat(32),
      apiUrl: slack.apiUrl,
      port: 0,
      logger: pino({ level: 'silent' }),
    });
    const gated = new Outbox({
      log,
      poster: app.poster,
      logger: pino({ level: 'silent' }),
      yieldTo: () => requests.idle(60_000),
    });
    const posts = () =>
      slack.calls().filter((c) => c.method === 'chat.postMessage' && JSON.stringify(c.body).includes(id));
    requests.enter();
    let settled = false;
    const sync = gated.sync(id).finally(() => {
      settled = true;
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(settled).toBe(false);
    expect(posts()).toHaveLength(0);
    requests.leave();
    await sync;
    expect(posts()).toHaveLength(1);
  });

  it('a post Slack performed but answered with a 503 is not sent again: the thread holds it once, and its ts is the one Slack kept', async () => {
    const id = 'inc_20261130_030000_outbox02';
    await log.create({
      id,
      kind: 'status',
      requester: 'U0REQUEST1',
      channel: CH,
      targets: ['kpro5'],
      text: 'status kpro5',
      reason: null,
      createdAt: '2026-11-30T03:00:00.000Z',
    });
    await log.append(id, { type: 'requested', at: '2026-11-30T03:00:00.000Z' });
    await log.append(id, {
      type: 'snapshot',
      at: '2026-11-30T03:00:01.000Z',
      label: 'status',
      snapshot: snapshot(),
      commands: [],
    });
    slack.failNext('chat.postMessage', 1, { status: 503, performed: true });
    // The first sync fails (the answer was lost); the next one finds the message by its metadata.
    await outbox.sync(id).catch(() => undefined);
    await outbox.sync(id);
    const parents = slack.messages(CH).filter((m) => JSON.stringify(m.blocks ?? []).includes(id));
    expect(parents).toHaveLength(1);
    const thread = slack.thread(CH, parents[0]!.ts);
    expect(thread).toHaveLength(2);
    expect((await log.slackRefs(id)).get('parent')?.ts).toBe(parents[0]!.ts);
  });
});
