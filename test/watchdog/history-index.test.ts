/**
 * A watchdog alert incident is written by the watchdog's own commit (one Lua step, not
 * IncidentLog.create): it must land in the per-machine index too, so `/gpu history` of its machine
 * lists it as an alert. Real fleet, real watch round, real Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readHistory } from '../../src/incident/history.ts';
import { summarizeIncident } from '../../src/incident/incident-summary.ts';
import { renderHistory } from '../../src/render/history.ts';
import { startWatchRig, type WatchRig } from './watch-rig.ts';

describe("watchdog alerts in a machine's history", () => {
  let rig: WatchRig;
  beforeAll(async () => {
    rig = await startWatchRig({
      hosts: [{ id: 'kpro5', gpus: 2, ramTotalGiB: 449, ramUsedGiB: 40 }],
      containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
    });
  }, 120_000);
  afterAll(async () => {
    await rig?.stop();
  });

  it('a raised and cleared RAM alert is in the host index once, found by history without a scan, and shown as an alert', async () => {
    await rig.log.create({
      id: 'inc_20261130_000000_first000',
      kind: 'status',
      requester: 'U0ALICE001',
      channel: 'C0ONCALL01',
      targets: ['kpro5'],
      text: 'status kpro5',
      reason: null,
      createdAt: new Date(Date.now() - 3_600_000).toISOString(),
    });
    await rig.fleet.setRam('kpro5', { totalGiB: 449, usedGiB: 440 });
    await rig.round();
    await rig.fleet.setRam('kpro5', { totalGiB: 449, usedGiB: 40 });
    await rig.round();
    const all = await rig.alerts();
    const alert = all.find((a) =>
      a.events.some((e) => 'alert' in e && e.alert.kind === 'ram_high' && e.alert.machineId === 'kpro5'),
    );
    if (!alert) throw new Error(`no RAM alert was raised: ${JSON.stringify(all)}`);
    expect(alert.events.map((e) => e.type)).toEqual(['alert_raised', 'alert_cleared']);
    expect((await rig.log.recentFor('kpro5', 10)).map((x) => x.id)).toEqual([
      alert.incidentId,
      'inc_20261130_000000_first000',
    ]);

    const host = rig.inventory.hosts[0];
    if (!host) throw new Error('no host');
    const r = await readHistory(rig.log, {
      target: { kind: 'host', id: 'kpro5', site: host.site },
      containers: ['ct129'],
      limit: 5,
    });
    expect(r.fallback).toBeNull();
    // The host's own alert and status read, and whatever the round raised on its container (saying which).
    expect(r.items.map((i) => i.id)).toEqual(
      expect.arrayContaining([alert.incidentId, 'inc_20261130_000000_first000']),
    );
    expect(r.items.at(-1)?.id).toBe('inc_20261130_000000_first000');
    for (const i of r.items) expect(i.via).toBe(i.meta?.targets.includes('kpro5') ? null : 'ct129');
    const text = renderHistory({
      target: { id: 'kpro5', kind: 'host' },
      containers: ['ct129'],
      limit: 5,
      cappedFrom: null,
      max: 25,
      more: r.more,
      scan: r.fallback,
      entries: r.items.map((i) => ({
        id: i.id,
        at: i.at,
        via: i.via,
        summary: i.meta ? summarizeIncident(i.meta, i.events) : null,
      })),
    });
    expect(text).toMatch(
      new RegExp(
        `• [^\\n]* · the watchdog · :rotating_light: alert · ram high: [^\\n]* · cleared [^\\n]* · \`${alert.incidentId}\``,
      ),
    );
  });
});
