/**
 * The watchdog round on the real fleet and real Redis (one alert per problem, never lost): an alert is raised
 * once, edited in place, cleared, and neither repeated nor lost across a worker restart, a crash between the
 * judgement and the commit, or two rounds judging at once. Each test has its own site (its own hosts), so
 * rounds of one test never read another's machines.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IncidentMetaSchema } from '../../src/incident/events.ts';
import { TargetLock } from '../../src/incident/target-lock.ts';
import { alertIncidentId } from '../../src/watchdog/alert-id.ts';
import { MachineGlanceSchema } from '../../src/watchdog/watch-glance.ts';
import { ALERTS_CHANNEL, startWatchRig, watchKeys, type WatchRig } from './watch-rig.ts';

describe('watchdog round: raise once, edit in place, clear, exactly once across failures', () => {
  let rig: WatchRig;
  beforeAll(async () => {
    rig = await startWatchRig({
      hosts: [
        { id: 'kpro1', site: 'a', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
        { id: 'kpro2', site: 'b', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
        { id: 'kpro3', site: 'c', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
        { id: 'kpro4', site: 'd', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
        { id: 'kpro7', site: 'e', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 },
      ],
    });
  }, 120_000);
  afterAll(async () => {
    await rig?.stop();
  });

  it('host RAM over the threshold: raised once over two rounds, edited when the figure moves, cleared once it is below', async () => {
    await rig.round({ site: 'a' });
    expect(await rig.eventsOf('kpro1', 'ram_high')).toEqual([]);
    await rig.fleet.setRam('kpro1', { totalGiB: 449, usedGiB: 440 });
    await rig.round({ site: 'a' });
    await rig.round({ site: 'a' });
    await rig.fleet.setRam('kpro1', { totalGiB: 449, usedGiB: 445 });
    await rig.round({ site: 'a' });
    await rig.fleet.setRam('kpro1', { totalGiB: 449, usedGiB: 40 });
    await rig.round({ site: 'a' });
    await rig.round({ site: 'a' });
    const events = await rig.eventsOf('kpro1', 'ram_high');
    expect(events.map((e) => [e.type, 'alert' in e ? e.alert.sentence : ''])).toEqual([
      ['alert_raised', 'host RAM 98 % used (440 of 449 GiB).'],
      ['alert_updated', 'host RAM 99 % used (445 of 449 GiB).'],
      ['alert_cleared', 'host RAM 99 % used (445 of 449 GiB).'],
    ]);
    const alerts = (await rig.alerts()).filter((a) =>
      a.events.some((e) => 'alert' in e && e.alert.machineId === 'kpro1'),
    );
    expect(alerts).toHaveLength(1);
    const raised = events[0];
    if (raised === undefined || !('alert' in raised)) throw new Error('no raise');
    const id = alertIncidentId(raised.alert);
    expect(alerts[0]?.incidentId).toBe(id);
    expect(await rig.log.meta(id)).toEqual(
      IncidentMetaSchema.parse({
        id,
        kind: 'alert',
        requester: 'watchdog',
        channel: ALERTS_CHANNEL,
        targets: ['kpro1'],
        text: 'kpro1/ram_high',
        reason: null,
        createdAt: new Date(raised.alert.raisedAt ?? 0).toISOString(),
      }),
    );
    // Cleared: no longer open; the bot's outbox has it to render.
    expect(await rig.redis.zscore(watchKeys(rig.prefix).open, id)).toBeNull();
    expect(await rig.redis.sismember(`${rig.prefix}:dirty`, id)).toBe(1);
  });

  it('a raised alert is open (scored by when it was raised), the glance says so, and every commit moves the version', async () => {
    const keys = watchKeys(rig.prefix);
    const v0 = Number((await rig.redis.get(keys.version)) ?? 0);
    await rig.fleet.setRam('kpro2', { totalGiB: 449, usedGiB: 430 });
    await rig.round({ site: 'b' });
    const [raised] = await rig.eventsOf('kpro2', 'ram_high');
    if (raised === undefined || !('alert' in raised)) throw new Error('no raise');
    const id = alertIncidentId(raised.alert);
    expect(Number(await rig.redis.zscore(keys.open, id))).toBe(raised.alert.raisedAt);
    const glance = MachineGlanceSchema.parse(JSON.parse((await rig.redis.hget(keys.last, 'kpro2')) ?? 'null'));
    expect(glance).toMatchObject({ machineId: 'kpro2', ok: true, code: null, gpus: 2, ramPct: 96, openAlerts: 1 });
    expect(Number(await rig.redis.get(keys.version))).toBeGreaterThan(v0);
  });

  it('a worker restarted between rounds repeats nothing and still clears what it raised', async () => {
    await rig.fleet.setRam('kpro3', { totalGiB: 449, usedGiB: 440 });
    await rig.round({ site: 'c' });
    await rig.restartWorker();
    await rig.round({ site: 'c' });
    await rig.fleet.setRam('kpro3', { totalGiB: 449, usedGiB: 40 });
    await rig.restartWorker();
    await rig.round({ site: 'c' });
    expect((await rig.eventsOf('kpro3', 'ram_high')).map((e) => e.type)).toEqual(['alert_raised', 'alert_cleared']);
  });

  it('a worker that dies between judging and committing leaves nothing behind, and the next round raises the alert once', async () => {
    await rig.fleet.setRam('kpro4', { totalGiB: 449, usedGiB: 440 });
    const keys = watchKeys(rig.prefix);
    const stateBefore = await rig.redis.get(keys.state('kpro4'));
    await expect(
      rig.round({
        site: 'd',
        deps: { beforeCommit: () => Promise.reject(new Error('killed between judge and commit')) },
      }),
    ).rejects.toThrow(/not judged: kpro4/);
    expect(await rig.eventsOf('kpro4', 'ram_high')).toEqual([]);
    expect(await rig.redis.get(keys.state('kpro4'))).toBe(stateBefore);
    await rig.restartWorker();
    await rig.round({ site: 'd' });
    await rig.round({ site: 'd' });
    expect((await rig.eventsOf('kpro4', 'ram_high')).map((e) => e.type)).toEqual(['alert_raised']);
  });

  it('two rounds judging the same machine at once commit one raise between them', async () => {
    await rig.fleet.setRam('kpro4', { totalGiB: 449, usedGiB: 40 });
    await rig.round({ site: 'd' });
    const before = (await rig.eventsOf('kpro4', 'ram_high')).length;
    await rig.fleet.setRam('kpro4', { totalGiB: 449, usedGiB: 441 });
    // Both rounds read, then both wait here until the other has judged too: their commits race.
    let waiting = 0;
    let release: () => void = () => undefined;
    const bothJudged = new Promise<void>((r) => (release = r));
    const gate = async (): Promise<void> => {
      waiting += 1;
      if (waiting === 2) release();
      await bothJudged;
    };
    const [a, b] = await Promise.all([
      rig.round({ site: 'd', deps: { beforeCommit: gate } }),
      rig.round({ site: 'd', deps: { beforeCommit: gate } }),
    ]);
    const types = (await rig.eventsOf('kpro4', 'ram_high')).slice(before).map((e) => e.type);
    expect(types).toEqual(['alert_raised']);
    // One of them found the state moved and judged again (or found a newer reading judged).
    expect([...(a ?? []), ...(b ?? [])].some((r) => r.attempts > 1 || r.skipped !== null)).toBe(true);
  });

  it('a machine whose unstick lock is held is read and alerted all the same, and the lock is left as it was', async () => {
    const lock = new TargetLock(rig.redis, rig.prefix);
    const holder = {
      incidentId: 'inc_20261201_120000_lockheld',
      requester: 'U0REQUEST1',
      since: new Date().toISOString(),
    };
    expect(await lock.acquire('kpro7', holder, 600_000)).toEqual({ ok: true });
    const ttl = await rig.redis.pttl(`${rig.prefix}:lock:kpro7`);
    await rig.fleet.setRam('kpro7', { totalGiB: 449, usedGiB: 440 });
    await rig.round({ site: 'e' });
    expect((await rig.eventsOf('kpro7', 'ram_high')).map((e) => e.type)).toEqual(['alert_raised']);
    expect(await lock.holder('kpro7')).toEqual(holder);
    expect(await rig.redis.pttl(`${rig.prefix}:lock:kpro7`)).toBeLessThanOrEqual(ttl);
  });

  it('no round signalled anything or ran anything but reads', () => {
    expect(rig.fleet.signals()).toEqual([]);
    for (const m of ['kpro1', 'kpro2', 'kpro3', 'kpro4', 'kpro7']) {
      const cmds = rig.fleet.commandLog(m).map((c) => c.cmd);
      expect(cmds.length).toBeGreaterThan(0);
      expect(
        cmds.filter((c) => /\bkill\b|nvidia-smi (-r|--gpu-reset)|-pm |pct (stop|shutdown|reboot)|\breboot\b/.test(c)),
      ).toEqual([]);
    }
  });
});
