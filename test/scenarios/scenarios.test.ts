/**
 * Every scenario file in this folder, played end to end (real Redis, sshd fleet, Bolt receiver,
 * fake Slack) through runScenario, with assertions on the JSON report. S1, S6 and S8 (status)
 * are here, S2-S5 and S7 (unstick) in unstick-scenarios.test.ts; any other YAML file dropped in
 * this folder is run generically (its `expect:` block must hold). Files marked `pending:` are
 * skipped with their reason: the feature they need is not there yet, and we do not fake it.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { REDIS_URL } from '../harness/stack.ts';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { byLabel, expectRunClean, file, FILES, HERE, tableRows, timeToFinish } from './report-helpers.ts';
import { cardButtons, runScenario, ScenarioRuntime, type Report } from './run-scenario.ts';
import { loadScenario, parseScenario, ScenarioFileError } from './schema.ts';

describe('scenario files', () => {
  it.each(FILES)('%s parses against the schema', (f) => {
    const s = loadScenario(join(HERE, f));
    expect(s.steps.length).toBeGreaterThan(0);
  });

  it('bad files are refused with every problem and its path', () => {
    const bad = `
name: bad
users: [alice]
approvers: [zed]
fleet:
  hosts: [{ id: kpro5, gpus: 2 }]
  holders: [{ name: h, machine: ct999, gpus: ["0:10"] }]
steps:
  - { as: bob, command: /gpu status kpro5 }
  - { waitFor: thread-done, incident: nope }
`;
    let msg = '';
    try {
      parseScenario(bad, 'bad.yaml');
    } catch (e) {
      expect(e).toBeInstanceOf(ScenarioFileError);
      msg = (e as Error).message;
    }
    expect(msg).toContain('approvers.0: unknown user "zed"');
    expect(msg).toContain('fleet.holders.0.machine: unknown machine "ct999"');
    expect(msg).toContain('steps.0.as: unknown user "bob"');
    expect(msg).toContain('steps.1.incident: no earlier command step has id "nope"');
    expect(() => parseScenario('name: x\nfleet: { hosts: [{ id: kpro5, gpus: 1 }] }\nsteps: [{ wait: soon }]')).toThrow(
      /steps\.0/,
    );
  });

  it('the run command reports a broken run for a missing file instead of throwing', async () => {
    const r = await runScenario(join(HERE, 'does-not-exist.yaml'));
    expect(r.broken?.stage).toBe('load');
  });

  it('click steps resolve to the approval card buttons the bot renders (gpu_approve / gpu_deny, value = approval id)', () => {
    const blocks = [
      { type: 'section', text: { type: 'mrkdwn', text: 'x' } },
      {
        type: 'actions',
        block_id: 'gpu_approval',
        elements: [
          { type: 'button', action_id: 'gpu_approve', text: { type: 'plain_text', text: 'Approve' }, value: 'apr_1' },
          { type: 'button', action_id: 'gpu_deny', text: { type: 'plain_text', text: 'Deny' }, value: 'apr_1' },
        ],
      },
    ];
    expect(cardButtons(blocks)).toEqual([
      { which: 'approve', actionId: 'gpu_approve', value: 'apr_1', text: 'Approve' },
      { which: 'deny', actionId: 'gpu_deny', value: 'apr_1', text: 'Deny' },
    ]);
  });
});

describe('click steps reach the real bot', () => {
  it('a click on the latest card is a signed block_actions from the named user, answered by the bot', async () => {
    const rt = await ScenarioRuntime.start(parseScenario(readFileSync(file('s1-'), 'utf8')));
    try {
      await rt.slash('alice', '/gpu status kpro5', { label: 'st' });
      const inc = rt.incident('st');
      if (!inc) throw new Error('no incident');
      expect(await rt.waitFor('thread-done', inc, 15_000)).toBe(true);
      const parent = rt.thread(inc)[0];
      if (!parent) throw new Error('no thread');
      // The plumbing only: a card in the shape render-unstick.ts posts, for an approval that does not exist.
      const value = 'apr_0000000000000000';
      const blocks = [
        { type: 'section', text: { type: 'mrkdwn', text: 'Host-level kill' } },
        {
          type: 'actions',
          block_id: 'gpu_approval',
          elements: [
            {
              type: 'button',
              action_id: 'gpu_approve',
              text: { type: 'plain_text', text: 'Approve' },
              style: 'primary',
              value,
            },
            {
              type: 'button',
              action_id: 'gpu_deny',
              text: { type: 'plain_text', text: 'Deny' },
              style: 'danger',
              value,
            },
          ],
        },
      ];
      const posted = await fetch(`${rt.stack.slack.apiUrl}chat.postMessage`, {
        method: 'POST',
        headers: { authorization: `Bearer ${rt.stack.slack.botToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ channel: inc.channel, thread_ts: parent.ts, text: 'Host-level kill', blocks }),
      });
      expect(((await posted.json()) as { ok: boolean }).ok).toBe(true);
      expect(await rt.holds('card-posted', inc)).toBe(true);
      const card = rt.latestCard(inc);
      expect(card?.buttons.map((b) => [b.which, b.value])).toEqual([
        ['approve', value],
        ['deny', value],
      ]);
      if (!card) throw new Error('no card');
      const before = rt.stack.slack.calls().length;
      const r = await rt.click('alice', 'approve', card);
      expect(r).toMatchObject({ sent: true, status: 200, value });
      const answer = await rt.stack.slack.waitFor(
        () =>
          rt.stack.slack
            .calls()
            .slice(before)
            .find((c) => /does not exist|Nothing was run/.test(JSON.stringify(c.body))),
        5000,
      );
      expect(answer.method === 'response_url' || answer.body.user === rt.userId('alice')).toBe(true);
    } finally {
      await rt.stop();
    }
  });
});

describe('S1 healthy host', () => {
  let r: Report;
  beforeAll(async () => {
    r = await runScenario(file('s1-'));
  });

  it('runs cleanly, in a few seconds', () => {
    expectRunClean(r);
    expect(r.startupMs).toBeLessThan(15_000);
    expect(r.runMs).toBeLessThan(10_000);
  });

  it('posts an 8-row table with 0 MiB used and the host RAM line', () => {
    const inc = byLabel(r, 'status');
    expect(inc.kind).toBe('status');
    expect(inc.requester).toBe(r.users.alice);
    expect(inc.thread[0]?.text).toContain('done');
    const reply = inc.thread[1];
    const rows = tableRows(reply?.blocks ?? null);
    expect(rows).toHaveLength(1 + 8);
    rows.slice(1).forEach((row, i) => {
      expect(row[0]).toBe(String(i));
      expect(row[2]).toMatch(/^0 \/ 143,771 MiB/);
    });
    expect(reply?.text).toContain('RAM: 12 / 449 GiB');
    expect(r.gpuMemory.kpro5?.map((g) => g.usedMiB)).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
  });

  it('the report lists the Slack calls and the read-only commands the host ran, and no signal', () => {
    const posts = r.slack.calls.filter((c) => c.method === 'chat.postMessage' && c.ok);
    expect(posts.length).toBeGreaterThanOrEqual(2);
    expect(posts.some((c) => c.thread !== null && c.channel === 'C0ONCALL01')).toBe(true);
    const cmds = (r.commands.kpro5 ?? []).filter((c) => c.t >= 0).map((c) => c.cmd);
    expect(cmds.some((c) => c.includes('nvidia-smi'))).toBe(true);
    expect(cmds.filter((c) => /\bkill\b|-r\b|--gpu-reset/.test(c))).toEqual([]);
    // Nor did the worker ask the host's agent for a destructive verb.
    expect(cmds.filter((c) => /\b(host|ct \d+) (signal|persistence|reset) /.test(c))).toEqual([]);
    expect(r.signals).toEqual([]);
    expect(r.steps[0]?.result.ackMs).toBeLessThan(3000);
  });

  it('leaves nothing behind: fleet dir removed, no process names it, no Redis key under its prefix', async () => {
    const { fleetDir, redisPrefix } = r.where;
    expect(fleetDir).toMatch(/^\/tmp\/gpu-medic-fleet-/);
    expect(existsSync(String(fleetDir))).toBe(false);
    const mentioning: number[] = [];
    for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
      try {
        if (readFileSync(`/proc/${pid}/cmdline`).includes(String(fleetDir))) mentioning.push(Number(pid));
      } catch {
        // gone meanwhile
      }
    }
    expect(mentioning).toEqual([]);
    const redis = new Redis(REDIS_URL);
    try {
      expect(await redis.keys(`${String(redisPrefix)}:*`)).toEqual([]);
    } finally {
      redis.disconnect();
    }
  });
});

describe('S6 host RAM pressure', () => {
  let r: Report;
  beforeAll(async () => {
    r = await runScenario(file('s6-'));
  });

  it('flags host RAM pressure beside the GPU table, and touches nothing', () => {
    expectRunClean(r);
    const inc = r.incidents[0];
    const reply = inc?.thread[1];
    expect(tableRows(reply?.blocks ?? null)).toHaveLength(9);
    expect(reply?.text).toMatch(/RAM pressure: 98% used \(439 of 449 GiB\)/);
    expect(r.signals).toEqual([]);
    expect(r.processes.tp0?.alive).toBe(true);
    expect(r.gpuMemory.kpro5?.[0]?.usedMiB).toBe(96413);
  });
});

/** S8 runs with a 4 s command and connect timeout: an error must be in the thread within that plus slack for a loaded CI box. */
const S8_BUDGET_MS = 4_000 + 6_000;

describe('S8 nvidia-smi hangs, host unreachable, host key changed', () => {
  let r: Report;
  beforeAll(async () => {
    r = await runScenario(file('s8-'));
  });

  it('runs cleanly', () => {
    expectRunClean(r);
  });

  it('a hanging nvidia-smi: clear error within the timeout, and only the status read ran there', () => {
    const inc = byLabel(r, 'hang');
    expect(inc.thread[1]?.text).toMatch(/did not answer within 4 s and was ended/);
    expect(timeToFinish(inc)).toBeLessThan(S8_BUDGET_MS);
    const cmds = (r.commands.kpro7 ?? []).filter((c) => c.t >= 0);
    // What the worker sent: agent lines to kpro7's host agent, of read verbs only.
    const sent = cmds.filter((c) => c.via === 'ssh');
    expect(sent.length).toBeGreaterThan(0);
    expect(sent.filter((c) => !/^gpu-medic 1 \d+ host /.test(c.cmd))).toEqual([]);
    expect(sent.filter((c) => /\b(signal|persistence|reset)\b/.test(c.cmd))).toEqual([]);
    // What ran there (the fleet's tool log): only the status reads.
    const ran = cmds.filter((c) => c.via === 'tool');
    expect(ran.length).toBeGreaterThan(0);
    expect(ran.filter((c) => !/nvidia-smi|free -b|fuser/.test(c.cmd))).toEqual([]);
    expect(cmds.filter((c) => /\bkill\b|-r\b|--gpu-reset/.test(c.cmd))).toEqual([]);
  });

  it('an unreachable host: clear error within the timeout, nothing ran', () => {
    const inc = byLabel(r, 'down');
    expect(inc.thread[1]?.text).toMatch(/could not reach|unreachable|refused|connect/i);
    expect(timeToFinish(inc)).toBeLessThan(S8_BUDGET_MS);
    expect((r.commands.kpro8 ?? []).filter((c) => c.t >= 0)).toEqual([]);
  });

  it('a changed host key: refused with a clear message, nothing ran', () => {
    const inc = byLabel(r, 'hostkey');
    expect(inc.thread[1]?.text).toContain('host key did not match');
    expect(inc.thread[1]?.text).toContain('Nothing was run');
    expect(timeToFinish(inc)).toBeLessThan(S8_BUDGET_MS);
    expect((r.commands.kpro9 ?? []).filter((c) => c.t >= 0)).toEqual([]);
  });

  it('the worker still answers the next command', () => {
    const inc = byLabel(r, 'next');
    expect(inc.thread[0]?.text).toContain('done');
    expect(inc.thread[1]?.text).toContain('RAM:');
    expect(tableRows(inc.thread[1]?.blocks ?? null)).toHaveLength(3);
  });
});

/** Files with their own describe block (here or in unstick-scenarios.test.ts). */
const DEDICATED = new Set(['s1-', 's2-', 's3-', 's4-', 's5-', 's6-', 's7-', 's8-', 's9-', 's10-', 's11-', 's12-']);

describe('other scenario files (generic: their expect block must hold)', () => {
  // Watchdog scenarios (settings.watch) are played by watch-scenarios.test.ts.
  const generic = FILES.filter(
    (f) =>
      ![...DEDICATED].some((p) => f.startsWith(p)) &&
      parseScenario(readFileSync(join(HERE, f), 'utf8'), f).settings.watch === undefined,
  );
  if (generic.length === 0) it('none yet: every file has its own describe block', () => expect(generic).toEqual([]));
  for (const f of generic) {
    const s = parseScenario(readFileSync(join(HERE, f), 'utf8'), f);
    if (s.pending !== undefined) {
      it.skip(`${s.name}: pending, ${s.pending}`, () => undefined);
      continue;
    }
    it(s.name, async () => {
      const r = await runScenario(join(HERE, f));
      expectRunClean(r);
    }, 180_000);
  }
});
