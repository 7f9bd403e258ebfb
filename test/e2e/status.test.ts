import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listMachines } from '../../src/config/machines.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import { keysOf, startStack, type Stack } from '../harness/stack.ts';

const OPS = 'C0ONCALL01';

function cellTexts(blocks: unknown): string[][] {
  const table = (blocks as Array<{ type: string; rows?: Array<Array<{ text: string }>> }>).find(
    (b) => b.type === 'table',
  );
  return (table?.rows ?? []).map((r) => r.map((c) => c.text));
}

describe('/gpu status end to end (real Redis, sshd, Bolt; fake Slack)', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [
          { id: 'kpro5', gpus: 8, ramTotalGiB: 449, ramUsedGiB: 40 },
          { id: 'kpro6', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 439 },
        ],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
    });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('acks at once, opens a thread and posts a table equal to the fleet state', async () => {
    const holder = await s.fleet.spawnHolder('kpro5', {
      gpus: [
        { index: 0, mib: 96413 },
        { index: 2, mib: 96417 },
      ],
      title: 'sglang::scheduler_TP0',
    });
    const r = await s.slash('status kpro5');
    expect(r.status).toBe(200);
    expect(r.elapsedMs).toBeLessThan(3000);
    expect(r.json).toMatchObject({ response_type: 'ephemeral' });
    expect(String((r.json as { text?: string }).text)).toContain('kpro5');
    const parent = await s.slack.waitFor(
      () => s.slack.messages(OPS).find((m) => m.text.includes('kpro5') && m.text.includes('done')),
      15000,
    );
    const thread = s.slack.thread(OPS, parent.ts);
    expect(thread).toHaveLength(2);
    const reply = thread[1];
    if (!reply) throw new Error('no reply');
    const rows = cellTexts(reply.blocks);
    const mem = s.fleet.gpuMemory('kpro5');
    expect(rows).toHaveLength(1 + mem.length);
    for (const g of mem) {
      const row = rows[1 + g.index];
      expect(row?.[0]).toBe(String(g.index));
      expect(row?.[2]).toContain(`${g.usedMiB.toLocaleString('en-US')} / ${g.totalMiB.toLocaleString('en-US')} MiB`);
    }
    expect(rows[1]?.[4]).toContain(`${holder.hostPid} `);
    expect(rows[3]?.[4]).toContain(`${holder.hostPid} `);
    expect(rows[2]?.[4]).toBe('-');
    expect(reply.text).toContain('RAM: 40 / 449 GiB');
    expect(reply.text).toContain('host view');
    // The durable log alone tells the story: requested, taken by a worker, read, finished ok.
    const events = await new IncidentLog(s.redis, s.prefix).events(r.incidentId ?? '');
    expect(events.map((e) => e.type)).toEqual(['requested', 'started', 'snapshot', 'finished']);
    expect(events[1]).toMatchObject({ type: 'started', worker: expect.stringMatching(/:\d+:/) });
    expect(events[3]).toMatchObject({ type: 'finished', outcome: 'ok' });
  });

  it('flags host RAM pressure, and names a container holder nvidia-smi does not list', async () => {
    await s.slash('status kpro6');
    const p6 = await s.slack.waitFor(
      () => s.slack.messages(OPS).find((m) => m.text.includes('`kpro6`') && m.text.includes('done')),
      15000,
    );
    const r6 = s.slack.thread(OPS, p6.ts)[1];
    expect(r6?.text).toMatch(/RAM pressure: 98% used \(439 of 449 GiB\)/);

    const h = await s.fleet.spawnHolder('ct129', {
      gpus: [{ index: 1, mib: 5000 }],
      title: 'python3 /opt/serve.py --token not-shown',
    });
    await s.slash('status ct129');
    const p = await s.slack.waitFor(
      () => s.slack.messages(OPS).find((m) => m.text.includes('`ct129`') && m.text.includes('done')),
      15000,
    );
    const thread = s.slack.thread(OPS, p.ts);
    const reply = thread[1];
    expect(reply?.text).toContain('container view');
    // No holder goes unnamed: nvidia-smi in the container lists no process, yet the table names the holder,
    // placed on GPU 1 by its device file and kpro5's GPU map, with its host PID and MiB, named
    // from its command line without the arguments.
    const rows = cellTexts(reply?.blocks);
    expect(rows[2]?.[4]).toBe(`${h.containerPid} (host ${h.hostPid}) python3 serve.py 5,000 MiB`);
    expect(reply?.text).not.toMatch(/no process listed/);
    expect(JSON.stringify(thread)).not.toContain('not-shown');
    // fuser's raw rows are in the details message, not the first screen.
    expect(reply?.text).not.toMatch(/Device holders \(fuser, container PIDs\)/);
    expect(thread[2]?.text).toMatch(/Device holders \(fuser, container PIDs\)/);
  });

  it('status all: one summary row per machine and a clear line for the one that is down', async () => {
    await s.fleet.stopMachine('kpro6');
    const r = await s.slash('status all');
    expect(r.status).toBe(200);
    const parent = await s.slack.waitFor(
      () => s.slack.messages(OPS).find((m) => m.text.includes('all machines') && m.text.includes('done')),
      30000,
    );
    const summary = s.slack.thread(OPS, parent.ts)[1];
    const rows = cellTexts(summary?.blocks);
    expect(rows.map((x) => x[0])).toEqual(['Machine', ...listMachines(s.inventory).map((m) => m.id)]);
    expect(rows.map((x) => x[0]).sort()).toEqual(['Machine', 'ct129', 'kpro5', 'kpro6']);
    expect(rows.find((x) => x[0] === 'kpro6')?.[1]).toBe('unreachable');
    expect(rows.find((x) => x[0] === 'kpro5')?.[1]).toMatch(/^\d+ busy \/ \d+ idle$/);
    expect(summary?.text).toMatch(/could not reach `kpro6`/);
    expect(parent.text).toContain('1 of 3 could not be read');
    const events = await new IncidentLog(s.redis, s.prefix).events(r.incidentId ?? '');
    expect(events.at(-1)).toMatchObject({ type: 'finished', outcome: 'partial' });
    expect(events.filter((e) => e.type === 'snapshot' || e.type === 'machine_error')).toHaveLength(3);
  });

  it('unknown target and malformed text: ephemeral answer, nothing queued', async () => {
    const before = await keysOf(s.redis, s.prefix);
    const a = await s.slash('status kpro55');
    expect((a.json as { text: string }).text).toMatch(
      /don't know a machine called `kpro55`; did you mean `kpro5`\?.*Nothing was queued/,
    );
    const b = await s.slash('status $(reboot)');
    expect((b.json as { text: string }).text).toMatch(/not a machine name.*Nothing was queued/);
    const c = await s.slash('reboot kpro5');
    expect((c.json as { text: string }).text).toMatch(/not a gpu-medic command/);
    const h = await s.slash('help');
    expect((h.json as { text: string; response_type: string }).response_type).toBe('ephemeral');
    expect((h.json as { text: string }).text).toContain('/gpu status');
    expect(await keysOf(s.redis, s.prefix)).toEqual(before);
    expect(before.some((k) => k.includes(':inc:'))).toBe(true);
  });

  it('a GPU that reports an error instead of numbers is flagged in the thread, and nothing says it went fine', async () => {
    await s.fleet.setGpuError('kpro5', 'nvml_version_mismatch');
    const r = await s.slash('status kpro5');
    const t = await s.threadOf(String(r.incidentId), {
      done: (th) => th.length === 2 && th[0]?.text.includes('done') === true,
    });
    expect(t[1]?.text).toMatch(/nvidia-smi reported an error: .*Driver\/library version mismatch/);
    expect(t[1]?.text).toContain('No GPU numbers');
    expect(t[0]?.text).not.toContain(':white_check_mark:');
    expect(t[0]?.text).toContain('GPU error on `kpro5`: driver/library version mismatch');
    const events = await new IncidentLog(s.redis, s.prefix).events(r.incidentId ?? '');
    expect(events.at(-1)).toMatchObject({ type: 'finished', outcome: 'failed' });
    await s.fleet.setGpuError('kpro5', null);
    await s.fleet.setGpuError('kpro5', 'gpu_lost', 3);
    const r2 = await s.slash('status kpro5');
    const t2 = await s.threadOf(String(r2.incidentId), {
      done: (th) => th.length === 2 && th[0]?.text.includes('done') === true,
    });
    expect(t2[1]?.text).toMatch(/nvidia-smi reported an error: .*(lost|GPU is lost)/i);
    await s.fleet.setGpuError('kpro5', null);
  });
});
