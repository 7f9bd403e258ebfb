import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { DEFAULT_MAPPING, mapAlert } from '../../src/alertmanager/map.ts';
import type { AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { renderAlert } from '../../src/render/alert.ts';
import { alertmanagerReceiver, silencesOf } from '../../src/alertmanager/wire.ts';
import type { WebhookAlert } from '../../src/alertmanager/payload.ts';
import { alertmanagerHandler, startAlertmanagerServer } from '../../src/alertmanager/receiver.ts';
import { parseEnv } from '../../src/config/env.ts';
import { conditionKey } from '../../src/watchdog/condition.ts';
import { captureLogger } from '../harness/capture-logger.ts';
import { payload, postAlerts } from './am-rig.ts';

const MACHINES = [{ id: 'kpro5', address: '10.0.0.5' }, { id: 'ct129' }];
const UUID = 'GPU-3f0c2a44-1b7e-4c59-9c0d-2d6a1e5b7f10';
const base = (labels: Record<string, string>): WebhookAlert => ({
  status: 'firing',
  labels,
  annotations: { summary: 's' },
  startsAt: '2026-12-01T10:00:00Z',
  endsAt: '',
  generatorURL: '',
  fingerprint: 'abc',
});

describe('mapping an Alertmanager alert to a machine, a GPU and a condition (pure)', () => {
  it('Hostname first, then instance without its port or by SSH address; a rename map; the UUID keys the condition', () => {
    expect(mapAlert(base({ Hostname: 'kpro5' }), MACHINES, DEFAULT_MAPPING, 0).machineId).toBe('kpro5');
    expect(mapAlert(base({ instance: '10.0.0.5:9400' }), MACHINES, DEFAULT_MAPPING, 0).machineId).toBe('kpro5');
    expect(mapAlert(base({ Hostname: 'nope', instance: 'ct129:9400' }), MACHINES, DEFAULT_MAPPING, 0).machineId).toBe(
      'ct129',
    );
    const renamed = { ...DEFAULT_MAPPING, rename: { 'gpu-node-7': 'kpro5' } };
    expect(mapAlert(base({ Hostname: 'gpu-node-7' }), MACHINES, renamed, 0).machineId).toBe('kpro5');
    const m = mapAlert(
      base({ alertname: 'DcgmXidError', Hostname: 'kpro5', gpu: '1', UUID }),
      MACHINES,
      DEFAULT_MAPPING,
      0,
    );
    expect(m.alert).toMatchObject({ kind: 'xid', gpu: 1, gpuUuid: UUID });
    expect(m.condition).toBe(conditionKey({ machineId: 'kpro5', kind: 'xid', gpu: 3, gpuUuid: UUID }));
  });

  it('an unmatched alert says why, an unknown name is its own kind with no condition, gpu_medic_kind overrides the name', () => {
    const none = mapAlert(base({ alertname: 'DcgmXidError' }), MACHINES, DEFAULT_MAPPING, 0);
    expect(none.machineId).toBeNull();
    expect(none.condition).toBeNull();
    expect(none.external.unmatched).toBe('it has none of the labels Hostname, instance that name a machine');
    const other = mapAlert(base({ alertname: 'NodeDown', Hostname: 'kpro5' }), MACHINES, DEFAULT_MAPPING, 0);
    expect([other.alert.kind, other.condition]).toEqual(['external', null]);
    const told = mapAlert(
      base({ alertname: 'MyLeak', Hostname: 'kpro5', gpu_medic_kind: 'ghost_memory', UUID }),
      MACHINES,
      DEFAULT_MAPPING,
      0,
    );
    expect(told.alert.kind).toBe('ghost_memory');
    expect(
      mapAlert(base({ Hostname: 'kpro5', UUID: 'GPU-$(reboot)' }), MACHINES, DEFAULT_MAPPING, 0).alert.gpuUuid,
    ).toBeUndefined();
  });
});

describe("an Alertmanager Xid says what the Xid means and what to do next (gpu-medic's Xid table)", () => {
  const xid = (summary: string): WebhookAlert => ({
    ...base({ alertname: 'DcgmXidError', Hostname: 'kpro5', gpu: '1', UUID }),
    annotations: { summary },
  });
  const nextLine = (a: WebhookAlert): { said: string; next: string } => {
    const m = mapAlert(a, MACHINES, DEFAULT_MAPPING, 0);
    const meta: IncidentMeta = {
      id: 'inc_alert_0123456789abcdef0123',
      kind: 'alert',
      requester: 'watchdog',
      channel: 'C0ALERTS01',
      targets: ['kpro5'],
      text: m.alert.key,
      reason: null,
      createdAt: '2026-12-01T10:00:00.000Z',
    };
    const events: AnyLoggedEvent[] = [
      { id: '1-0', type: 'alert_raised', at: '2026-12-01T10:00:00.000Z', alert: m.alert, external: m.external },
    ];
    const text = renderAlert(meta, events)[0]?.text ?? '';
    return { said: m.alert.sentence, next: text.split('\n').find((l) => l.startsWith('*Next:*')) ?? '' };
  };

  it('Xid 79 in the summary (the rule in deploy/monitoring/dcgm-rules.yml): fallen off the bus, a reset will not help, reboot', () => {
    const { said, next } = nextLine(xid('Xid 79 on GPU 1 of kpro5 (DCGM).'));
    expect(said).toBe(
      'Xid 79 on GPU 1 of kpro5 (DCGM). Xid 79: GPU has fallen off the bus; a reset will not help: reboot the host, then check power, cooling and seating of the GPU.',
    );
    expect(next).toBe(
      '*Next:* the line above says what the Xid means and what to do, or where to read which Xid it was; *Status* shows the GPU now.',
    );
  });

  it('an Xid not in the table, or none named, says where to look rather than pointing at nothing', () => {
    expect(nextLine(xid('Xid 7 on GPU 1 of kpro5 (DCGM).')).said).toContain(
      "Xid 7: not in gpu-medic's table; look it up in NVIDIA's Xid catalogue.",
    );
    expect(nextLine(xid('DCGM saw an Xid.')).said).toContain(
      'The alert does not say which Xid: look for `NVRM: Xid` lines in the kernel log of kpro5 (`journalctl -k`).',
    );
  });
});

describe('the receiver handler on a port of its own (real HTTP, the store injected)', () => {
  const TOKEN = 'unit-am-token-0123456789abcdef012345678';
  async function serve(record: () => Promise<'raised'>, rate = { perSecond: 1000, burst: 1000 }) {
    const { logger } = captureLogger('am');
    const server = await startAlertmanagerServer({
      host: '127.0.0.1',
      port: 0,
      handler: alertmanagerHandler({
        token: TOKEN,
        record,
        machines: MACHINES,
        mapping: DEFAULT_MAPPING,
        now: Date.now,
        logger,
        rate,
      }),
      logger,
    });
    return { url: `http://127.0.0.1:${server.port}/alertmanager`, close: () => server.close() };
  }
  const one = payload([
    { status: 'firing', fingerprint: 'abc', labels: { alertname: 'DcgmXidError', Hostname: 'kpro5' } },
  ]);

  it('answers 503 when the alert cannot be recorded (Redis down), so Alertmanager retries', async () => {
    const s = await serve(async () => {
      throw new Error('Connection is closed.');
    });
    try {
      const r = await postAlerts(s.url, one, TOKEN);
      expect(r.status).toBe(503);
      expect(r.body).toContain('retry later');
    } finally {
      await s.close();
    }
  });

  it('answers 503 with Retry-After past the rate bound, and 200 again once it has room', async () => {
    let n = 0;
    const s = await serve(
      async () => {
        n++;
        return 'raised';
      },
      { perSecond: 1, burst: 2 },
    );
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) statuses.push((await postAlerts(s.url, one, TOKEN)).status);
      expect(statuses).toEqual([200, 200, 503]);
      expect(n).toBe(2);
    } finally {
      await s.close();
    }
  });

  it('only POST /alertmanager: another path is 404, another method 405', async () => {
    const s = await serve(async () => 'raised');
    try {
      expect((await fetch(s.url.replace('/alertmanager', '/other'), { method: 'POST' })).status).toBe(404);
      expect((await fetch(s.url)).status).toBe(405);
    } finally {
      await s.close();
    }
  });
});

describe('without GPU_MEDIC_ALERTMANAGER_TOKEN', () => {
  it('there is no receiver: no route on the bot, no port of its own, and Redis is never asked', async () => {
    const env = parseEnv(
      { SLACK_BOT_TOKEN: 'xoxb-1', SLACK_APP_TOKEN: 'xapp-1', GPU_MEDIC_ALERTS_CHANNEL: 'C0ALERTS01' },
      'bot',
    ).env;
    if (!env) throw new Error('env invalid');
    const redis = new Redis({ lazyConnect: true });
    const r = alertmanagerReceiver(
      env,
      { defaults: { user: 'root', commandTimeoutSec: 20, connectTimeoutSec: 8 }, hosts: [], containers: [] },
      redis,
      captureLogger('am').logger,
    );
    expect(r.route).toBeNull();
    expect(await r.start()).toBeNull();
    expect(redis.status).toBe('wait');
    expect(silencesOf(env)).toEqual({});
    redis.disconnect();
  });
});

describe('receiver settings', () => {
  const bot = { SLACK_BOT_TOKEN: 'xoxb-1', SLACK_APP_TOKEN: 'xapp-1' };
  it('a token needs the alerts channel, and in Socket Mode a port of its own; the worker refuses the token', () => {
    const token = 'x'.repeat(40);
    const p = parseEnv({ ...bot, GPU_MEDIC_ALERTMANAGER_TOKEN: token }, 'bot').problems.map((x) => x.variable);
    expect(p).toEqual(expect.arrayContaining(['GPU_MEDIC_ALERTS_CHANNEL', 'GPU_MEDIC_ALERTMANAGER_PORT']));
    const ok = parseEnv(
      {
        ...bot,
        GPU_MEDIC_ALERTMANAGER_TOKEN: token,
        GPU_MEDIC_ALERTS_CHANNEL: 'C0ALERTS01',
        GPU_MEDIC_ALERTMANAGER_PORT: '9095',
      },
      'bot',
    );
    expect(ok.problems).toEqual([]);
    expect(ok.env?.GPU_MEDIC_ALERTMANAGER_MACHINE_LABELS).toEqual(['Hostname', 'instance']);
    const w = parseEnv({ GPU_MEDIC_ALERTMANAGER_TOKEN: token }, 'worker').problems;
    expect(w.map((x) => x.variable)).toEqual(['GPU_MEDIC_ALERTMANAGER_TOKEN']);
    expect(JSON.stringify(w)).not.toContain(token);
  });
});
