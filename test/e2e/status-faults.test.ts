import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sendSlashCommand } from '../harness/slack/signed-request.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { keysOf, startStack, type Stack } from '../harness/stack.ts';

const OPS = 'C0ONCALL01';

describe('/gpu status when things go wrong', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [
          { id: 'kpro5', gpus: 2 },
          { id: 'kpro7', gpus: 2 },
          { id: 'kpro8', gpus: 1 },
          { id: 'kpro9', gpus: 1 },
        ],
      },
      tweakInventory: (inv) => {
        inv.defaults.commandTimeoutSec = 2;
      },
    });
  });
  afterAll(async () => {
    await s?.stop();
  });

  const parentFor = (machine: string, timeout = 15000) =>
    s.slack.waitFor(
      () => s.slack.messages(OPS).find((m) => m.text.includes(`\`${machine}\``) && m.text.includes('done')),
      timeout,
    );

  it('a changed host key is refused: nothing runs, the thread says why and names both fingerprints', async () => {
    const pinned = s.fleet.machine('kpro7').hostKeyFingerprint;
    await s.fleet.replaceHostKey('kpro7');
    const seen = s.fleet.machine('kpro7').hostKeyFingerprint;
    expect(seen).not.toBe(pinned);
    const logBefore = s.fleet.commandLog('kpro7').length;
    await s.slash('status kpro7');
    const p = await parentFor('kpro7');
    const reply = s.slack.thread(OPS, p.ts)[1];
    expect(reply?.text).toContain('host key did not match');
    expect(reply?.text).toContain(String(seen));
    expect(reply?.text).toContain(String(pinned));
    expect(reply?.text).toContain('Nothing was run');
    expect(s.fleet.commandLog('kpro7').length).toBe(logBefore);
  });

  it('a hanging nvidia-smi is ended within the timeout, and the worker serves the next job', async () => {
    await s.fleet.setHang('kpro8', true);
    const t0 = Date.now();
    await s.slash('status kpro8');
    const p = await parentFor('kpro8', 20000);
    expect(Date.now() - t0).toBeLessThan(12000);
    const reply = s.slack.thread(OPS, p.ts)[1];
    expect(reply?.text).toMatch(/did not answer within 2 s and was ended/);
    await s.fleet.setHang('kpro8', false);
    // No nvidia-smi left running on the machine after the timeout.
    const { execFileSync } = await import('node:child_process');
    const ps = execFileSync('ps', ['-eo', 'args']).toString();
    expect(ps.split('\n').filter((l) => l.includes('nvidia-smi') && l.includes(s.fleet.machine('kpro8').dir))).toEqual(
      [],
    );
    await s.slash('status kpro5');
    const ok = await parentFor('kpro5');
    expect(s.slack.thread(OPS, ok.ts)[1]?.text).toContain('RAM:');
  });

  it('status all with a frozen machine: its row says it stopped answering, at the command deadline, after every other row', async () => {
    // A first round pools a connection to every machine; then kpro9 freezes (sshd SIGSTOPped).
    const first = await s.slash('status all');
    await s.threadOf(String(first.incidentId), {
      timeoutMs: 30_000,
      done: (t) => t.length >= 2 && /done/.test(t[0]?.text ?? ''),
    });
    await s.fleet.freezeMachine('kpro9', true);
    try {
      const t0 = Date.now();
      const r = await s.slash('status all');
      const id = String(r.incidentId);
      const t = await s.threadOf(id, {
        timeoutMs: 60_000,
        done: (th) => th.length >= 2 && /done/.test(th[0]?.text ?? ''),
      });
      const took = Date.now() - t0;
      const events = await new IncidentLog(s.redis, s.prefix).events(id);
      const rowOf = (m: string) =>
        events.findIndex(
          (e) =>
            (e.type === 'snapshot' && e.snapshot.machineId === m) || (e.type === 'machine_error' && e.machineId === m),
        );
      const frozen = events[rowOf('kpro9')];
      expect(
        frozen?.type === 'machine_error' ? [frozen.code, frozen.message.includes('stopped answering')] : null,
      ).toEqual(['command_timeout', true]);
      // Every healthy machine's row was logged before the frozen one's.
      for (const m of ['kpro5', 'kpro8']) {
        expect(events[rowOf(m)]?.type).toBe('snapshot');
        expect(rowOf(m)).toBeLessThan(rowOf('kpro9'));
      }
      // commandTimeoutSec 2 (+1 s remote kill grace, +1 s client grace); the keepalive would take 45 s or more.
      expect(took).toBeLessThan(2000 + 10_000);
      expect(t[1]?.text).toMatch(/kpro9[\s\S]*stopped answering/);
    } finally {
      await s.fleet.freezeMachine('kpro9', false);
    }
  });

  it('forged signature and stale timestamp are rejected and queue nothing', async () => {
    const before = await keysOf(s.redis, s.prefix);
    const fields = {
      text: 'status kpro5',
      user_id: 'U0REQUEST1',
      channel_id: OPS,
      response_url: s.slack.newResponseUrl(),
    };
    const forged = await sendSlashCommand(s.eventsUrl, 'not-the-secret-at-all', fields);
    expect(forged.status).toBe(401);
    const stale = await sendSlashCommand(s.eventsUrl, s.signingSecret, fields, {
      timestampSec: Math.floor(Date.now() / 1000) - 6 * 60,
    });
    expect(stale.status).toBe(401);
    const tampered = await sendSlashCommand(s.eventsUrl, s.signingSecret, fields, {
      mutateBodyAfterSigning: (b) => b.replace('kpro5', 'kpro7'),
    });
    expect(tampered.status).toBe(401);
    await new Promise((r) => setTimeout(r, 300));
    expect(await keysOf(s.redis, s.prefix)).toEqual(before);
  });

  it('Slack answering 429 then recovering: the table still arrives, exactly once', async () => {
    s.slack.failNext('chat.postMessage', 2, { status: 429, retryAfterSec: 1 });
    const r = await s.slash('status kpro5');
    const id = String(r.incidentId);
    const t = await s.threadOf(id, { done: (th) => th.length === 2 && th[0]?.text.includes('done') === true });
    expect(s.slack.calls('chat.postMessage').filter((c) => c.status === 429).length).toBe(2);
    await new Promise((res) => setTimeout(res, 500));
    const parent = t[0];
    if (!parent) throw new Error('no parent');
    expect(s.slack.thread(OPS, parent.ts)).toHaveLength(2);
    const parents = s.slack
      .calls('chat.postMessage')
      .filter((c) => c.status === 200 && JSON.stringify(c.body.blocks ?? '').includes(id));
    expect(parents).toHaveLength(1);
    expect(
      s.slack.calls('chat.postMessage').filter((c) => c.status === 200 && c.body.thread_ts === parent.ts),
    ).toHaveLength(1);
  });

  it('a Slack outage delays messages and loses none; re-rendering from the log posts nothing twice', async () => {
    s.slack.setUnreachable(true);
    const r = await s.slash('status kpro5');
    const id = String(r.incidentId);
    await new Promise((res) => setTimeout(res, 1500));
    expect(s.slack.messages(OPS).some((m) => JSON.stringify(m.blocks ?? []).includes(id))).toBe(false);
    s.slack.setUnreachable(false);
    const t = await s.threadOf(id, {
      timeoutMs: 30000,
      done: (th) => th.length === 2 && th[0]?.text.includes('done') === true,
    });
    for (let i = 0; i < 100 && (await s.redis.sismember(`${s.prefix}:dirty`, id)) === 1; i++)
      await new Promise((res) => setTimeout(res, 50));
    expect(await s.redis.sismember(`${s.prefix}:dirty`, id)).toBe(0);
    const postsBefore = s.slack.calls('chat.postMessage').filter((c) => c.status === 200).length;
    // Re-render every incident from the log, as a restarted bot would.
    const ids = await s.redis.zrange(`${s.prefix}:incidents`, 0, -1);
    for (const i of ids) await s.bot.outbox.sync(i);
    expect(s.slack.calls('chat.postMessage').filter((c) => c.status === 200).length).toBe(postsBefore);
    expect(s.slack.thread(OPS, t[0]?.ts ?? '')).toHaveLength(2);
  });

  it('never writes the Slack token or the SSH private key to logs, Slack or Redis job data', async () => {
    const { readFileSync } = await import('node:fs');
    const key = readFileSync(String(s.inventory.defaults.keyFile), 'utf8');
    const keyBody = key.split('\n')[1] ?? 'x';
    const logs = s.logText();
    expect(logs.length).toBeGreaterThan(100);
    const slackText = JSON.stringify(s.slack.calls());
    const redisDump: string[] = [];
    for (const k of await keysOf(s.redis, s.prefix)) {
      const type = await s.redis.type(k);
      if (type === 'string') redisDump.push(String(await s.redis.get(k)));
      if (type === 'hash') redisDump.push(JSON.stringify(await s.redis.hgetall(k)));
      if (type === 'stream') redisDump.push(JSON.stringify(await s.redis.xrange(k, '-', '+')));
    }
    for (const hay of [logs, slackText, redisDump.join('\n')]) {
      expect(hay).not.toContain(s.slack.botToken);
      expect(hay).not.toContain(s.signingSecret);
      expect(hay).not.toContain(keyBody);
    }
  });
});
