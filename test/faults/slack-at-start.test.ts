/**
 * The bot must stay up when Slack does not: started while Slack's Web API is down, two ways: refusing
 * connections (every connection destroyed) and answering 503 to every call. Real Bolt receiver
 * (signed requests) or the real Socket Mode client against the local Socket Mode server, real
 * Redis, real sshd fleet, fake Slack. The bot must come up, say what it waits for (log and
 * health), keep serving what it can, and once Slack is back post what it owed exactly once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newIncidentId } from '../../src/incident/ids.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { createDispatcher } from '../../src/queue/dispatcher.ts';
import type { FakeSlack, StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { sendSlashCommand } from '../harness/slack/signed-request.ts';
import { startStack, type Stack } from '../harness/stack.ts';

const OPS = 'C0ONCALL01';
const FLEET = { hosts: [{ id: 'kpro5', gpus: 2 }] };

const OUTAGES = [
  {
    name: 'refusing connections',
    down: (s: FakeSlack) => s.setUnreachable(true),
    up: (s: FakeSlack) => s.setUnreachable(false),
  },
  {
    name: 'answering 503',
    down: (s: FakeSlack) => s.failNext('*', 1_000_000, { status: 503 }),
    up: (s: FakeSlack) => s.clearFaults(),
  },
];

const parentsOf = (slack: FakeSlack, id: string): StoredMessage[] =>
  slack
    .messages(OPS)
    .filter((m) => m.metadata?.event_payload.incident === id && m.metadata.event_payload.view_key === 'parent');

async function slackProblem(s: Stack): Promise<string | null> {
  const check = s.bot.health().slack;
  if (!check) throw new Error('the bot has no slack health check');
  return check();
}

describe.each(OUTAGES)("the bot started while Slack's Web API is $name", (outage) => {
  describe('HTTP mode', () => {
    let s: Stack;
    beforeAll(async () => {
      s = await startStack({ fleet: FLEET, beforeBotStart: outage.down });
    }, 120_000);
    afterAll(async () => {
      await s?.stop();
    }, 60_000);

    it('acks a command sent during the outage within 3 s, says what it waits for, posts its thread exactly once when Slack is back, and serves the next command', async () => {
      const r = await sendSlashCommand(
        s.eventsUrl,
        s.signingSecret,
        { text: 'status kpro5', user_id: 'U0REQUEST1', channel_id: OPS, response_url: s.slack.newResponseUrl() },
        // Slack's own deadline for the ack: past it Slack shows the user an error.
        { timeoutMs: 3000 },
      );
      expect(r.status).toBe(200);
      const ack = String((r.json as { text?: unknown } | null)?.text ?? '');
      const id = /incident `(inc_[a-z0-9_]+)`/.exec(ack)?.[1];
      expect(id, ack).toBeDefined();
      expect(await slackProblem(s)).toMatch(/waiting for Slack's Web API \(auth\.test\)/);
      // Each try is the Web API client's own few quick retries; the log says so once they are spent.
      await expect
        .poll(() => s.logText(), { timeout: 30_000 })
        .toMatch(/waiting for Slack's Web API \(auth\.test\).*next try in \d+ s/);
      // The worker finished it meanwhile; nothing was posted while Slack was away.
      await expect
        .poll(
          async () => (await new IncidentLog(s.redis, s.prefix).events(String(id))).some((e) => e.type === 'finished'),
          {
            timeout: 60_000,
          },
        )
        .toBe(true);
      expect(parentsOf(s.slack, String(id))).toEqual([]);

      outage.up(s.slack);
      const t = await s.threadOf(String(id), { timeoutMs: 90_000, done: (th) => /done/i.test(th[0]?.text ?? '') });
      expect(t.length).toBeGreaterThanOrEqual(2);
      await expect.poll(() => slackProblem(s), { timeout: 90_000, interval: 500 }).toBeNull();
      await s.quiet({ stableMs: 1500, timeoutMs: 60_000 });
      expect(parentsOf(s.slack, String(id))).toHaveLength(1);

      const next = await s.slash('status kpro5');
      expect(next.status).toBe(200);
      expect(next.incidentId).not.toBeNull();
      await s.threadOf(String(next.incidentId), { timeoutMs: 60_000 });
      expect(parentsOf(s.slack, String(next.incidentId))).toHaveLength(1);
    }, 240_000);
  });

  describe('Socket Mode', () => {
    let s: Stack;
    beforeAll(async () => {
      s = await startStack({ fleet: FLEET, socketMode: true, beforeBotStart: outage.down });
    }, 120_000);
    afterAll(async () => {
      await s?.stop();
    }, 60_000);

    it('stays up saying it waits for Socket Mode, connects by itself when Slack is back, and posts exactly once what it owed', async () => {
      const socket = s.socket;
      if (!socket) throw new Error('not in Socket Mode');
      await expect.poll(() => slackProblem(s), { timeout: 30_000 }).toMatch(/waiting for Socket Mode/);
      expect(socket.connectedCount()).toBe(0);
      // Owed: a status request queued (as the bot does) while Slack was away; the worker answers it.
      const id = newIncidentId(new Date());
      const log = new IncidentLog(s.redis, s.prefix);
      const at = new Date().toISOString();
      await log.create({
        id,
        kind: 'status',
        requester: 'U0REQUEST1',
        channel: OPS,
        targets: ['kpro5'],
        text: 'status kpro5',
        reason: null,
        createdAt: at,
      });
      const dispatcher = createDispatcher({ connection: s.redis, prefix: s.prefix });
      await dispatcher.enqueue('default', { kind: 'status', incidentId: id, machines: ['kpro5'] }, `${id}-default`);
      await log.append(id, { type: 'requested', at });
      await expect
        .poll(async () => (await log.events(id)).some((e) => e.type === 'finished'), { timeout: 60_000 })
        .toBe(true);
      expect(parentsOf(s.slack, id)).toEqual([]);

      outage.up(s.slack);
      await socket.waitForConnection(90_000);
      await expect.poll(() => slackProblem(s), { timeout: 90_000, interval: 500 }).toBeNull();
      await s.threadOf(id, { timeoutMs: 90_000, done: (th) => /done/i.test(th[0]?.text ?? '') });
      await s.quiet({ stableMs: 1500, timeoutMs: 60_000 });
      expect(parentsOf(s.slack, id)).toHaveLength(1);
      expect(socket.connectedCount()).toBe(1);
      await dispatcher.close();
    }, 240_000);
  });
});
