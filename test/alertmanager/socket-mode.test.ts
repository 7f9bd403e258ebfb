import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../harness/stack.ts';
import { payload, postAlerts } from './am-rig.ts';

const ALERTS = 'C0ALERTS01';
const TOKEN = 'sock-am-token-0123456789abcdef012345678';

describe('the Alertmanager receiver in Socket Mode: a port of its own (no HTTP port to share)', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      fleet: { hosts: [{ id: 'kpro5', gpus: 1 }], containers: [] },
      socketMode: true,
      noWorkers: true,
      botEnv: {
        GPU_MEDIC_ALERTS_CHANNEL: ALERTS,
        GPU_MEDIC_ALERTMANAGER_TOKEN: TOKEN,
        GPU_MEDIC_ALERTMANAGER_PORT: '0',
      },
    });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('serves on a port of its own, the bot having no HTTP port, and posts the alert to the alerts channel', async () => {
    expect(s.bot.port).toBeNull();
    const port = s.bot.alertmanagerPort;
    expect(port).toBeGreaterThan(0);
    const r = await postAlerts(
      `http://127.0.0.1:${port}/alertmanager`,
      payload([
        {
          status: 'firing',
          fingerprint: 'abc1',
          labels: { alertname: 'DcgmXidError', Hostname: 'kpro5' },
          annotations: { summary: 'Xid via socket mode' },
        },
      ]),
      TOKEN,
    );
    expect(r.status).toBe(200);
    const m = await s.slack.waitFor(
      () => s.slack.messages(ALERTS).find((x) => x.text.includes('Xid via socket mode')),
      15_000,
    );
    expect(m.text).toContain('NVIDIA Xid');
  });
});
