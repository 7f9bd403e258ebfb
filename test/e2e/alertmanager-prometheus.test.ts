/**
 * The Alertmanager receiver end to end against REAL Prometheus and REAL Alertmanager (Debian's
 * packages; scripts/setup.sh --ci installs them): a test exporter serves DCGM field names, Prometheus
 * evaluates the docs' DCGM rules (deploy/monitoring/dcgm-rules.yml, `for:` shortened), Alertmanager
 * (the docs' receiver, deploy/monitoring/alertmanager.yml, with short intervals) calls gpu-medic's
 * bot, and the fake Slack shows the message. Real Bolt, real Redis, real sshd fleet and worker.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import type { StoredMessage } from '../harness/slack/fake-slack-api.ts';
import { blockActionPayload, sendInteraction } from '../harness/slack/signed-request.ts';
import {
  type Daemon,
  freePort,
  startAlertmanager,
  startExporter,
  startPrometheus,
  type TestExporter,
} from '../harness/monitoring.ts';
import { startStack, type Stack } from '../harness/stack.ts';

const ALERTS = 'C0ALERTS01';
const ALICE = 'U0ALICE001';
const TOKEN = 'e2e-am-token-0123456789abcdef0123456789';
const UUID = 'GPU-5d1c0a2e-8f3b-4e6a-9b7c-1a2b3c4d5e6f';
const DCGM_LABELS = {
  gpu: '0',
  UUID,
  device: 'nvidia0',
  modelName: 'NVIDIA H100 80GB HBM3',
  Hostname: 'ct129',
  DCGM_FI_DRIVER_VERSION: '550.54.15',
};

interface Rule {
  alert: string;
  for?: string;
}

/** The docs' DCGM rules with every `for:` at 0 s, so the test does not wait minutes. */
function quickRules(): string {
  const doc = parse(readFileSync('deploy/monitoring/dcgm-rules.yml', 'utf8')) as { groups: Array<{ rules: Rule[] }> };
  for (const g of doc.groups) for (const r of g.rules) r.for = '0s';
  return stringify(doc);
}

/** The docs' Alertmanager config, pointed at this bot, with the token in a file, and intervals of seconds. */
function quickAlertmanager(receiverPort: number): string {
  const doc = parse(readFileSync('deploy/monitoring/alertmanager.yml', 'utf8')) as {
    route: Record<string, unknown>;
    receivers: Array<{
      webhook_configs: Array<Record<string, unknown> & { http_config: { authorization: Record<string, string> } }>;
    }>;
  };
  Object.assign(doc.route, { group_wait: '1s', group_interval: '1s', repeat_interval: '2s' });
  const hook = doc.receivers[0]?.webhook_configs[0];
  if (!hook) throw new Error('the docs config has no webhook_configs');
  hook.url = `http://127.0.0.1:${receiverPort}/alertmanager`;
  hook.http_config.authorization.credentials_file = 'token';
  return stringify(doc);
}

const shown = (m: StoredMessage | undefined): string => `${m?.text ?? ''}\n${JSON.stringify(m?.blocks ?? [])}`;
const elementsOf = (m: StoredMessage | undefined) =>
  (
    (m?.blocks ?? []) as Array<{
      type: string;
      block_id?: string;
      elements?: Array<{ action_id: string; value?: string }>;
    }>
  )
    .filter((b) => b.type === 'actions')
    .flatMap((b) => b.elements ?? []);

describe('DCGM rule → real Prometheus → real Alertmanager → gpu-medic → one Slack message with its buttons', () => {
  let s: Stack;
  let exporter: TestExporter;
  let am: Daemon;
  let prom: Daemon;

  beforeAll(async () => {
    const receiverPort = await freePort();
    am = await startAlertmanager(quickAlertmanager(receiverPort), { token: TOKEN });
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 1 }],
        containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
      },
      // Alerts are opened by Alertmanager here; the watchdog's scheduler stays off (no alerts channel for the worker).
      botEnv: {
        GPU_MEDIC_ALERTS_CHANNEL: ALERTS,
        GPU_MEDIC_ALERTMANAGER_TOKEN: TOKEN,
        // Its own fixed port, so Alertmanager reaches the bot again after a restart.
        GPU_MEDIC_ALERTMANAGER_PORT: String(receiverPort),
        // Snooze also silences in this Alertmanager.
        GPU_MEDIC_ALERTMANAGER_URL: am.url,
      },
      env: { GPU_MEDIC_TERM_GRACE_SEC: '1', GPU_MEDIC_RELEASE_TIMEOUT_SEC: '5' },
    });
    exporter = await startExporter();
    exporter.set('DCGM_FI_DEV_XID_ERRORS', DCGM_LABELS, 0);
    exporter.set('DCGM_FI_DEV_FB_USED', DCGM_LABELS, 512);
    exporter.set('DCGM_FI_DEV_FB_FREE', DCGM_LABELS, 80_000);
    exporter.set('DCGM_FI_DEV_GPU_UTIL', DCGM_LABELS, 40);
    exporter.set('DCGM_FI_DEV_ROW_REMAP_FAILURE', DCGM_LABELS, 0);
    prom = await startPrometheus({ rules: quickRules(), scrapePort: exporter.port, alertmanagerPort: am.port });
  }, 120_000);
  afterAll(async () => {
    await prom?.stop();
    await am?.stop();
    await exporter?.close();
    await s?.stop();
  });

  /** Clicks `actionId` on `m` as Alice; returns the ephemeral answer. */
  async function click(m: StoredMessage, actionId: string): Promise<string> {
    const responseUrl = s.slack.newResponseUrl();
    const r = await sendInteraction(
      s.eventsUrl,
      s.signingSecret,
      blockActionPayload({
        user: ALICE,
        channel: ALERTS,
        messageTs: m.ts,
        actionId,
        value: elementsOf(m).find((e) => e.action_id === actionId)?.value ?? '',
        blockId:
          ((m.blocks ?? []) as Array<{ type: string; block_id?: string }>).find((b) => b.type === 'actions')
            ?.block_id ?? 'actions',
        responseUrl,
        messageText: m.text,
        messageBlocks: m.blocks ?? [],
      }),
    );
    expect(r.status).toBe(200);
    const answer = await s.slack.waitFor(() => s.slack.responses().find((p) => p.url === responseUrl), 20_000);
    return String(answer.body.text ?? '');
  }

  const xidMessages = (): StoredMessage[] => s.slack.messages(ALERTS).filter((m) => shown(m).includes('NVIDIA Xid'));

  it('fires once with buttons, Unstick runs the normal flow, a repeat edits, a bot restart neither loses nor doubles it, and it clears', async () => {
    exporter.set('DCGM_FI_DEV_XID_ERRORS', DCGM_LABELS, 79);
    const first = await s.slack.waitFor(
      () => xidMessages().find((m) => shown(m).includes('Xid 79 on GPU 0 of ct129')),
      60_000,
    );
    expect(elementsOf(first).map((e) => e.action_id)).toEqual([
      'gpu_alert_status',
      'gpu_alert_unstick',
      'gpu_alert_snooze_1h',
      'gpu_alert_snooze_1d',
      'gpu_alert_snooze_gpu_1h',
      'gpu_alert_snooze_gpu_1d',
    ]);
    expect(shown(first)).toContain('From Alertmanager: `DcgmXidError`');
    expect(shown(first)).toContain(`<${prom.url}/graph?`);

    // Unstick on it: the normal unstick flow (a thread of its own), the clicker its requester.
    const answer = await click(first, 'gpu_alert_unstick');
    expect(answer).toMatch(/^:ambulance: Unsticking `ct129`/);
    const unstickId = /`(inc_[a-z0-9_]+)`/.exec(answer)?.[1] ?? '';
    await s.threadOf(unstickId, { channel: ALERTS, timeoutMs: 40_000, done: (t) => t.length > 1 });

    // A repeat that says more (Alertmanager's repeat carries the new value): the same message, edited.
    exporter.set('DCGM_FI_DEV_XID_ERRORS', DCGM_LABELS, 48);
    const edited = await s.slack.waitFor(
      () => xidMessages().find((m) => shown(m).includes('Xid 48 on GPU 0 of ct129')),
      60_000,
    );
    expect(edited.ts).toBe(first.ts);

    // The bot goes down while Alertmanager has news; it retries until the new bot takes it.
    await s.stopBot();
    exporter.set('DCGM_FI_DEV_XID_ERRORS', DCGM_LABELS, 31);
    await s.slack.waitFor(() => am.output().includes('connection refused') || null, 30_000);
    await s.startBot();
    const after = await s.slack.waitFor(
      () => xidMessages().find((m) => shown(m).includes('Xid 31 on GPU 0 of ct129')),
      60_000,
    );
    expect(after.ts).toBe(first.ts);

    // Back to normal: Alertmanager sends resolved, the message is marked cleared, without buttons.
    exporter.set('DCGM_FI_DEV_XID_ERRORS', DCGM_LABELS, 0);
    const cleared = await s.slack.waitFor(
      () => xidMessages().find((m) => m.ts === first.ts && shown(m).includes('Cleared at')),
      60_000,
    );
    expect(elementsOf(cleared)).toEqual([]);
    expect(xidMessages()).toHaveLength(1);
    const posts = s.slack.calls('chat.postMessage').filter((c) => JSON.stringify(c.body).includes('NVIDIA Xid'));
    expect(posts).toHaveLength(1);
  }, 240_000);

  it('Snooze on an Alertmanager alert also creates a silence in Alertmanager for its labels, until the snooze ends', async () => {
    exporter.set('DCGM_FI_DEV_ROW_REMAP_FAILURE', DCGM_LABELS, 1);
    const m = await s.slack.waitFor(
      () =>
        s.slack
          .messages(ALERTS)
          .find((x) => shown(x).includes('row remapping failed') && !shown(x).includes('Cleared at')),
      60_000,
    );
    const answer = await click(m, 'gpu_alert_snooze_gpu_1h');
    expect(answer).toMatch(/Alertmanager silences this alert \(its labels\) until then too: silence `[0-9a-f-]+`/);
    const silences = (await (await fetch(`${am.url}/api/v2/silences`)).json()) as Array<{
      status: { state: string };
      matchers: Array<{ name: string; value: string; isEqual: boolean; isRegex: boolean }>;
      endsAt: string;
      createdBy: string;
    }>;
    const active = silences.filter((x) => x.status.state === 'active');
    expect(active).toHaveLength(1);
    expect(active[0]?.matchers).toEqual(
      expect.arrayContaining([
        { name: 'alertname', value: 'DcgmRowRemapFailure', isEqual: true, isRegex: false },
        { name: 'UUID', value: UUID, isEqual: true, isRegex: false },
        { name: 'Hostname', value: 'ct129', isEqual: true, isRegex: false },
      ]),
    );
    expect(Date.parse(active[0]?.endsAt ?? '') - Date.now()).toBeGreaterThan(55 * 60_000);
    expect(active[0]?.createdBy).toBe(`gpu-medic (Slack user ${ALICE})`);
  }, 120_000);
});
