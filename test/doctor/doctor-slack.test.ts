import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IncidentLog } from '../../src/incident/log.ts';
import { keysOf, startStack, type Stack } from '../harness/stack.ts';

/** `/gpu doctor` end to end: signed slash command → queued job → worker with the SSH key → table in a thread. */
const ALICE = 'U0ALICE001'; // requests, not an admin
const BOB = 'U0BOB00001'; // approver, not an admin
const CAROL = 'U0CAROL001'; // admin (GPU_MEDIC_ADMINS), not an approver

function tableRows(blocks: unknown): string[][] {
  const table = (blocks as Array<{ type: string; rows?: Array<Array<{ text: string }>> }>).find(
    (b) => b.type === 'table',
  );
  return (table?.rows ?? []).map((r) => r.map((c) => c.text));
}

describe('/gpu doctor through Slack (real Redis, sshd fleet, Bolt; fake Slack)', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2 }],
        containers: [
          { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
          { id: 'ct130', vmid: 130, host: 'kpro5', omitTools: ['fuser'] },
        ],
      },
      env: { GPU_MEDIC_APPROVERS: BOB, GPU_MEDIC_ADMINS: CAROL },
    });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  it('someone who is not an admin is refused and nothing is queued', async () => {
    const r = await s.slash('doctor all', { user: ALICE });
    expect(r.ackText).toMatch(/is for gpu-medic admins only/);
    expect(r.ackText).toContain('Nothing was queued');
    // No incident and no job (job ids are incident ids): only BullMQ's own bookkeeping keys may exist.
    expect((await keysOf(s.redis, s.prefix)).filter((k) => k.includes('inc_'))).toEqual([]);
  });

  it('an approver who is not in GPU_MEDIC_ADMINS is refused, named by that setting, and nothing is queued', async () => {
    const r = await s.slash('doctor all', { user: BOB });
    expect(r.ackText).toMatch(/is for gpu-medic admins only \(GPU_MEDIC_ADMINS/);
    expect(r.ackText).toContain('gpu-medic doctor');
    expect((await keysOf(s.redis, s.prefix)).filter((k) => k.includes('inc_'))).toEqual([]);
  });

  it('an admin gets the same table as the CLI in a thread: every machine and check, the missing fuser failed with its fix', async () => {
    const r = await s.slash('doctor all', { user: CAROL });
    expect(r.ackText).toMatch(/Checking all 3 machines/);
    const id = String(r.incidentId);
    const thread = await s.threadOf(id, {
      timeoutMs: 60000,
      done: (t) => t.length >= 2 && /problem|passed/.test(t[0]?.text ?? ''),
    });
    expect(thread[0]?.text).toMatch(/1 problem that would make unstick fail/);
    const reply = thread[1];
    const rows = tableRows(reply?.blocks);
    expect(rows[0]).toEqual(['Machine', 'Check', 'Result', 'Detail']);
    expect(rows.find((x) => x[0] === 'ct130' && x[1] === 'fuser')?.[2]).toBe('FAIL');
    expect(rows.find((x) => x[0] === 'ct129' && x[1] === 'pid namespace')?.[2]).toBe('ok');
    expect(new Set(rows.slice(1).map((x) => x[0]))).toEqual(new Set(['kpro5', 'ct129', 'ct130']));
    expect(reply?.text).toContain('psmisc');
    const events = await new IncidentLog(s.redis, s.prefix).events(id);
    expect(events.map((e) => e.type)).toEqual(['requested', 'started', 'doctor_report', 'finished']);
    expect(events[3]).toMatchObject({ type: 'finished', outcome: 'failed' });
    // Read-only: nothing was signalled.
    expect(s.fleet.signals()).toEqual([]);
  });

  it('an unknown machine: a suggestion, nothing queued', async () => {
    const before = await keysOf(s.redis, s.prefix);
    const r = await s.slash('doctor ct13', { user: CAROL });
    expect(r.ackText).toMatch(/No machine called "ct13"; did you mean `ct1[23]\d`\?/);
    expect(await keysOf(s.redis, s.prefix)).toEqual(before);
  });
});
