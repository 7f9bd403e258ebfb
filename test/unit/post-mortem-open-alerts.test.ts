/**
 * What is left to follow up: `gpu-medic incident <id> --markdown` says which watchdog alerts were still open on the
 * incident's machines, read from the watch store the watchdog commits to (real Redis, the real
 * WatchRoundStore commit), not "nothing left to do".
 */
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { runIncidentsCommand } from '../../src/cli/incidents-command.ts';
import { IncidentLog } from '../../src/incident/log.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { WatchRoundStore } from '../../src/watch-store/watch-round-store.ts';
import type { Alert } from '../../src/watchdog/judge.ts';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const AT = '2026-12-01T20:52:24.000Z';

describe('the post-mortem lists the alerts still open on its machines', () => {
  const redis = new Redis(REDIS_URL);
  const prefix = `t${randomBytes(4).toString('hex')}`;
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });

  /** The watchdog raising `alert` on its machine, as a round commits it. */
  async function raise(alert: Alert): Promise<void> {
    const store = new WatchRoundStore(redis, prefix, 'C0ALERTS01');
    const stored = await store.load(alert.machineId);
    const alerts = { ...stored.state.alerts, [alert.key]: alert };
    const ok = await store.commit(
      alert.machineId,
      stored.raw,
      { ...stored.state, alerts, lastReadingAt: alert.lastSeenAt },
      [{ type: 'raise', alert }],
      {
        machineId: alert.machineId,
        at: alert.lastSeenAt,
        ok: true,
        code: null,
        gpus: 8,
        gpuMemoryUsedMiB: 0,
        gpuMemoryTotalMiB: 0,
        ramPct: 98,
        openAlerts: 1,
      },
      alert.lastSeenAt,
    );
    expect(ok).toBe(true);
  }
  const ram = (machineId: string): Alert => {
    const since = Date.parse('2026-12-01T20:40:00.000Z');
    return {
      key: `${machineId}/ram_high`,
      kind: 'ram_high',
      machineId,
      gpu: null,
      since,
      raisedAt: since,
      sentence: 'Host RAM 98 % used (439 of 449 GiB).',
      lastSeenAt: since,
    };
  };

  it('a status of ct129 that read its host kpro5: the host RAM alert is what to follow up, another host’s is not', async () => {
    const log = new IncidentLog(redis, prefix);
    const meta: IncidentMeta = {
      id: 'inc_20261201_205224_openalrt',
      kind: 'status',
      requester: 'U0ALICE001',
      channel: 'C0ONCALL01',
      targets: ['ct129'],
      text: 'status ct129',
      reason: null,
      createdAt: AT,
    };
    await log.create(meta);
    await log.append(meta.id, { type: 'requested', at: AT });
    await log.append(meta.id, {
      type: 'snapshot',
      at: AT,
      label: 'status',
      snapshot: {
        machineId: 'ct129',
        view: 'container',
        takenAt: AT,
        gpus: [],
        processes: [],
        holders: [],
        kernelMounts: [],
        ram: null,
        gpuError: null,
      },
      commands: [
        { machineId: 'kpro5', command: 'nvidia-smi -q -x', code: 0, signal: null, durationMs: 90, timedOut: false },
      ],
    });
    await log.append(meta.id, { type: 'finished', at: AT, outcome: 'ok', durationMs: 900 });
    await raise(ram('kpro5'));
    await raise(ram('kpro9'));

    let out = '';
    const code = await runIncidentsCommand('incident', [meta.id, '--markdown'], {
      env: { REDIS_URL, GPU_MEDIC_PREFIX: prefix },
      out: new Writable({ write: (c: Buffer, _e, cb) => ((out += c.toString()), cb()) }),
      err: new Writable({ write: (_c, _e, cb) => cb() }),
    });
    expect(code).toBe(0);
    const follow = out.slice(out.indexOf('## What to follow up'));
    expect(follow).toMatch(
      /^- Host RAM high on `kpro5` is still open \(raised 2026-12-01 20:40:00 UTC, alert `inc_alert_[0-9a-f]{20}`\): Host RAM 98 % used \(439 of 449 GiB\)\.$/m,
    );
    expect(follow).not.toContain('kpro9');
    expect(follow).not.toContain('Nothing was left open');
  });
});
