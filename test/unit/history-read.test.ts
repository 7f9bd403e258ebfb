/**
 * The per-machine index of the incident log and the history read over it, on a real Redis (a
 * random prefix per test). History is read-only: it never writes a key.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { IncidentLog } from '../../src/incident/log.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { readHistory } from '../../src/incident/history.ts';
import { newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';

const redis: Redis = newRedis();
let prefix = '';
let log: IncidentLog;
beforeEach(() => {
  prefix = randomPrefix('hist');
  log = new IncidentLog(redis, prefix);
});
afterEach(async () => {
  await removePrefix(redis, prefix);
});
afterAll(() => {
  redis.disconnect();
});

const KPRO5 = { kind: 'host' as const, id: 'kpro5', site: 'default' };
const CT129 = {
  kind: 'container' as const,
  id: 'ct129',
  site: 'default',
  vmid: 129,
  hostId: 'kpro5',
  ownAddress: true,
};

let seq = 0;
function meta(kind: IncidentMeta['kind'], targets: string[], minute: number): IncidentMeta {
  seq += 1;
  return {
    id: `inc_20261130_10${String(minute).padStart(2, '0')}00_t${seq}`,
    kind,
    requester: 'U0ALICE001',
    channel: 'C0ONCALL01',
    targets,
    text: `${kind} ${targets.join(' ')}`,
    reason: null,
    createdAt: `2026-11-30T10:${String(minute).padStart(2, '0')}:00.000Z`,
  };
}

/** An incident written the way a process from before the per-machine index wrote it. */
async function createUnindexed(m: IncidentMeta): Promise<void> {
  await redis
    .multi()
    .set(`${prefix}:inc:${m.id}:meta`, JSON.stringify(m), 'NX')
    .zadd(`${prefix}:incidents`, Date.parse(m.createdAt), m.id)
    .exec();
}

describe('the per-machine incident index', () => {
  it('create indexes the incident under each of its targets, in the same MULTI as the global index', async () => {
    const a = meta('status_all', ['kpro5', 'ct129', 'ct130'], 1);
    await log.create(a);
    for (const t of ['kpro5', 'ct129', 'ct130']) expect((await log.recentFor(t, 10)).map((x) => x.id)).toEqual([a.id]);
    expect(await log.recentFor('ct131', 10)).toEqual([]);
    expect(await log.targetIndexSince()).toBe(Date.parse(a.createdAt));
    // The marker is the first indexed incident's time, not moved by later ones.
    await log.create(meta('status', ['kpro5'], 2));
    expect(await log.targetIndexSince()).toBe(Date.parse(a.createdAt));
  });
});

describe('readHistory', () => {
  it("a container's history is its own incidents, newest first, at most N, and says there are more", async () => {
    const ms = [
      meta('unstick', ['ct129'], 1),
      meta('status', ['ct129'], 2),
      meta('status', ['kpro5'], 3),
      meta('unstick', ['ct129'], 4),
    ];
    for (const m of ms) await log.create(m);
    const r = await readHistory(log, { target: CT129, containers: [], limit: 2 });
    expect(r.items.map((i) => i.id)).toEqual([ms[3]?.id, ms[1]?.id]);
    expect(r.more).toBe(true);
    expect(r.items.every((i) => i.via === null)).toBe(true);
    expect(r.items[0]?.meta).toEqual(ms[3]);
    const all = await readHistory(log, { target: CT129, containers: [], limit: 5 });
    expect(all.items).toHaveLength(3);
    expect(all.more).toBe(false);
  });

  it("a host's history holds its containers' incidents, each saying which container, and one incident naming both once", async () => {
    const own = meta('status', ['kpro5'], 1);
    const ct = meta('unstick', ['ct129'], 2);
    const both = meta('status_all', ['kpro5', 'ct129'], 3);
    const other = meta('unstick', ['ct200'], 4);
    for (const m of [own, ct, both, other]) await log.create(m);
    const r = await readHistory(log, { target: KPRO5, containers: ['ct129', 'ct130'], limit: 10 });
    expect(r.items.map((i) => [i.id, i.via])).toEqual([
      [both.id, null],
      [ct.id, 'ct129'],
      [own.id, null],
    ]);
  });

  it('each item carries its events as logged', async () => {
    const m = meta('unstick', ['ct129'], 1);
    await log.create(m);
    await log.append(m.id, { type: 'requested', at: m.createdAt });
    const r = await readHistory(log, { target: CT129, containers: [], limit: 5 });
    expect(r.items[0]?.events.map((e) => e.type)).toEqual(['requested']);
  });

  it('incidents from before the index are found by a bounded scan of the global index, and the answer says so', async () => {
    const old1 = meta('unstick', ['ct129'], 1);
    const oldOther = meta('status', ['kpro6'], 2);
    const old2 = meta('status', ['kpro5'], 3);
    for (const m of [old1, oldOther, old2]) await createUnindexed(m);
    const fresh = meta('status', ['ct129'], 10);
    await log.create(fresh);
    const r = await readHistory(log, { target: KPRO5, containers: ['ct129'], limit: 10 });
    expect(r.items.map((i) => i.id)).toEqual([fresh.id, old2.id, old1.id]);
    expect(r.fallback).toEqual({ scanned: 3, bound: 500, complete: true, before: fresh.createdAt });

    // A bound smaller than what lies before the index: it says the scan was not complete.
    const cut = await readHistory(log, { target: KPRO5, containers: ['ct129'], limit: 10 }, { scanBound: 2 });
    expect(cut.items.map((i) => i.id)).toEqual([fresh.id, old2.id]);
    expect(cut.fallback).toEqual({ scanned: 2, bound: 2, complete: false, before: fresh.createdAt });
  });

  it('no scan when the index alone fills N (older incidents come after them anyway), and none when nothing predates it', async () => {
    await createUnindexed(meta('status', ['ct129'], 1));
    for (let i = 2; i < 5; i++) await log.create(meta('status', ['ct129'], i));
    const r = await readHistory(log, { target: CT129, containers: [], limit: 2 });
    expect(r.fallback).toBeNull();
    expect(r.more).toBe(true);
    const p2 = randomPrefix('hist');
    const log2 = new IncidentLog(redis, p2);
    try {
      await log2.create(meta('status', ['ct129'], 1));
      expect((await readHistory(log2, { target: CT129, containers: [], limit: 5 })).fallback).toBeNull();
    } finally {
      await removePrefix(redis, p2);
    }
  });

  it('an index entry whose record is gone is shown as gone, not dropped', async () => {
    const m = meta('unstick', ['ct129'], 1);
    await log.create(m);
    await redis.del(`${prefix}:inc:${m.id}:meta`);
    const r = await readHistory(log, { target: CT129, containers: [], limit: 5 });
    expect(r.items).toEqual([{ id: m.id, at: m.createdAt, meta: null, events: [], via: null }]);
  });

  it('reading history writes nothing', async () => {
    await createUnindexed(meta('status', ['ct129'], 1));
    await log.create(meta('unstick', ['ct129'], 2));
    const keys = async () => {
      const out: Record<string, string> = {};
      for (const k of (await redis.keys(`${prefix}:*`)).sort())
        out[k] = `${await redis.type(k)}:${(await redis.dumpBuffer(k))?.toString('hex')}`;
      return out;
    };
    const before = await keys();
    await readHistory(log, { target: KPRO5, containers: ['ct129'], limit: 25 });
    expect(await keys()).toEqual(before);
  });
});
