import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runIncidentsCommand } from '../../src/cli/incidents-command.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { execMain } from '../harness/dist.ts';
import { freePort } from '../harness/sshd.ts';
import { REDIS_URL, startStack, type Stack } from '../harness/stack.ts';

/** Runs the command in this process and returns what it printed. */
async function cli(sub: 'incidents' | 'incident', args: string[], env: Record<string, string>) {
  let out = '';
  let err = '';
  const sink = (f: (s: string) => void) => new Writable({ write: (c: Buffer, _e, cb) => (f(c.toString()), cb()) });
  const code = await runIncidentsCommand(sub, args, {
    env,
    out: sink((s) => (out += s)),
    err: sink((s) => (err += s)),
  });
  return { code, out, err };
}

describe('the incident log read without Slack: `incidents` and `incident <id>`', () => {
  let s: Stack;
  let env: Record<string, string>;
  let unstickId = '';
  let statusId = '';
  let hostPid = 0;

  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2 }],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
      env: { GPU_MEDIC_TERM_GRACE_SEC: '1', GPU_MEDIC_RELEASE_TIMEOUT_SEC: '5', GPU_MEDIC_POLL_MS: '300' },
    });
    env = { REDIS_URL, GPU_MEDIC_PREFIX: s.prefix };
    const h = await s.fleet.spawnHolder('ct129', { gpus: [{ index: 1, mib: 40_000 }], title: 'sglang::scheduler_TP1' });
    hostPid = h.hostPid;
    const u = await s.slash('unstick ct129 rank hung after OOM');
    unstickId = String(u.incidentId);
    await s.threadOf(unstickId, { timeoutMs: 30000, done: (t) => /Recovered/.test(t[0]?.text ?? '') });
    const st = await s.slash('status kpro5');
    statusId = String(st.incidentId);
    await s.threadOf(statusId);
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('incident <id>: one line per logged event, in order, with the commands run, the signals sent and the verdict', async () => {
    const events = await new IncidentLog(s.redis, s.prefix).events(unstickId);
    const r = await cli('incident', [unstickId], env);
    expect(r.code).toBe(0);
    expect(r.err).toBe('');
    const lines = r.out.trimEnd().split('\n');
    expect(lines[0]).toBe(`incident ${unstickId} · unstick of ct129 · Recovered (finished ok)`);
    expect(lines[1]).toMatch(/by U0REQUEST1 in C0ONCALL01 · \d+ events$/);
    // Header, blank line, then exactly one line per event: the log cannot be shown short or padded.
    expect(lines.slice(3)).toHaveLength(events.length);
    expect(lines[3]).toMatch(
      /^\d\d:\d\d:\d\d\.\d{3} {2}requested by U0REQUEST1 in C0ONCALL01: "unstick ct129 rank hung after OOM" \(reason: rank hung after OOM\)$/,
    );
    for (const e of events) {
      if (e.type === 'command') expect(r.out).toContain(`$ ${e.record.command.split('\n')[0]}`);
    }
    expect(r.out).toMatch(
      new RegExp(`TERM host PID ${hostPid} \\(container PID \\d+, "sglang::scheduler_TP1[^"]*"\\): sent`),
    );
    expect(r.out).toMatch(/verdict: Recovered, 40,000 MiB freed/);
  });

  it('--json gives the meta and the events exactly as the log holds them', async () => {
    const r = await cli('incident', [statusId, '--json'], env);
    expect(r.code).toBe(0);
    const log = new IncidentLog(s.redis, s.prefix);
    expect(JSON.parse(r.out)).toEqual({ meta: await log.meta(statusId), events: await log.events(statusId) });
  });

  it('incidents: the newest first, each with how it ended', async () => {
    const r = await cli('incidents', ['--limit', '5'], env);
    expect(r.code).toBe(0);
    const lines = r.out.trimEnd().split('\n');
    expect(lines.map((l) => l.split(' ')[0])).toEqual([statusId, unstickId]);
    expect(lines[0]).toMatch(/status +kpro5 +U0REQUEST1 +finished \(ok\)$/);
    expect(lines[1]).toMatch(/unstick +ct129 +U0REQUEST1 +Recovered \(finished ok\)$/);
    const one = await cli('incidents', ['--limit', '1'], env);
    expect(one.out.trimEnd().split('\n')).toHaveLength(1);
  });

  it('the real entry point prints the same timeline as a separate process', async () => {
    const { stdout } = await execMain(['incident', unstickId], {
      env: { ...process.env, ...env },
      cwd: process.cwd(),
    });
    expect(stdout).toBe((await cli('incident', [unstickId], env)).out);
  });

  it('bad input gets a plain answer and a non-zero code; nothing is written to the log', async () => {
    const keysBefore = (await s.redis.keys(`${s.prefix}:*`)).sort();
    const unknown = await cli('incident', ['inc_20260101_000000_zzzzzzzz'], env);
    expect(unknown).toMatchObject({ code: 1, out: '' });
    expect(unknown.err).toMatch(
      /no incident inc_20260101_000000_zzzzzzzz under prefix t[0-9a-f]+; `gpu-medic incidents` lists the recent ones/,
    );
    const notId = await cli('incident', ['../../etc/passwd'], env);
    expect(notId.code).toBe(2);
    expect(notId.err).toMatch(/is not an incident id/);
    expect((await cli('incident', [], env)).err).toMatch(/which incident\?/);
    expect((await cli('incidents', ['--limit', 'lots'], env)).code).toBe(2);
    expect((await cli('incidents', ['--force'], env)).err).toMatch(/unexpected argument "--force"/);
    expect((await cli('incidents', [], { ...env, GPU_MEDIC_PREFIX: 'bad prefix!' })).code).toBe(2);
    const empty = await cli('incidents', [], { ...env, GPU_MEDIC_PREFIX: `${s.prefix}-none` });
    expect(empty).toMatchObject({ code: 0, out: `no incidents under prefix ${s.prefix}-none\n` });
    expect((await s.redis.keys(`${s.prefix}:*`)).sort()).toEqual(keysBefore);
  });

  it('Redis unreachable: says so at once and exits 1, without printing the password in REDIS_URL', async () => {
    const port = await freePort();
    const t0 = Date.now();
    const r = await cli('incidents', [], {
      REDIS_URL: `redis://:hunter2-secret@127.0.0.1:${port}`,
      GPU_MEDIC_PREFIX: 'gpu-medic',
    });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(new RegExp(`cannot reach Redis at redis://:\\*\\*\\*@127\\.0\\.0\\.1:${port}`));
    expect(r.err).not.toContain('hunter2');
    expect(Date.now() - t0).toBeLessThan(10_000); // no retry loop (a loose bound, not a speed goal)
  });
});
