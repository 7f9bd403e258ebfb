/**
 * The scenario runner's watchdog features (to replay alerts as a user sees them): `settings.watch`, `restart`
 * steps, `clickAlert` steps, `alert` conditions and `alerts` expectations. Alert incidents here are written
 * into the durable log directly, the way the watchdog writes them (src/watchdog/alert-events.ts), and the
 * real bot's outbox renders them into the fake Slack's alerts channel.
 */
import { describe, expect, it } from 'vitest';
import { alertIncidentId } from '../../src/watchdog/alert-id.ts';
import type { Alert } from '../../src/watchdog/judge.ts';
import { WATCHDOG_REQUESTER } from '../../src/watchdog/alert-events.ts';
import { expectRunClean } from './report-helpers.ts';
import {
  checkAlerts,
  pickControl,
  runScenario,
  ScenarioRuntime,
  type AlertReport,
  type Control,
} from './run-scenario.ts';
import { parseScenario, ScenarioFileError } from './schema.ts';

const problems = (text: string): string => {
  try {
    parseScenario(text, 'bad.yaml');
  } catch (e) {
    expect(e).toBeInstanceOf(ScenarioFileError);
    return (e as Error).message;
  }
  return '';
};

const FLEET = `
fleet:
  hosts: [{ id: kpro5, gpus: 2 }]
  containers: [{ id: ct129, vmid: 129, host: kpro5 }]
`;

describe('scenario files: the watchdog fields are checked', () => {
  it('bad watch settings, restart values, alert clicks, conditions and expectations are refused with their paths and what is allowed', () => {
    const msg = problems(`
name: bad
users: [alice]
settings: { watch: { intervalSec: 1, ramPct: 120, channel: general } }
${FLEET}
steps:
  - { as: alice, clickAlert: { kind: ghost, machine: kpro5, button: snooze } }
  - { restart: all }
  - { waitFor: { alert: { kind: xid, machine: kpro5, state: up } } }
expect:
  alerts: [{ kind: ram_high, machine: kpro5, messages: -1 }]
`);
    expect(msg).toContain('settings.watch.intervalSec: must be 2 or more');
    expect(msg).toContain('settings.watch.ramPct:');
    expect(msg).toContain('settings.watch.channel: must be a channel ID like C0ALERTS01');
    expect(msg).toContain('steps.0.clickAlert.kind: must be an alert kind: ghost_memory, holder_stuck, ram_high');
    expect(msg).toContain('steps.0.clickAlert.button: must be status, unstick, snooze-1h or snooze-1d');
    expect(msg).toContain('steps.1.restart: must be bot, worker or both');
    expect(msg).toContain('steps.2.waitFor.alert.state: must be raised, updated, cleared or snoozed');
    expect(msg).toContain('expect.alerts.0.messages:');
  });

  it("alert steps without settings.watch, unknown machines and a container not on the alert's host are refused", () => {
    const msg = problems(`
name: bad
users: [alice]
fleet:
  hosts: [{ id: kpro5, gpus: 2 }, { id: kpro6, gpus: 1 }]
  containers: [{ id: ct129, vmid: 129, host: kpro5 }]
steps:
  - { as: alice, clickAlert: { kind: ram_high, machine: kpro6, button: unstick, container: ct129 } }
  - { as: alice, clickAlert: { kind: ram_high, machine: kpro5, button: status, container: ct129 } }
  - { waitFor: { alert: { kind: xid, machine: kpro9, state: raised } } }
  - { as: alice, command: /gpu status kpro5, after: { alert: { kind: xid, machine: kpro5, state: cleared } } }
expect:
  alerts: [{ kind: ram_high, machine: kpro7, messages: 1 }]
`);
    expect(msg).toContain('steps.0.clickAlert: clickAlert needs settings.watch (the watchdog is off without it)');
    expect(msg).toContain('steps.0.clickAlert.container: container "ct129" is not on kpro6 (its host is kpro5)');
    expect(msg).toContain(
      'steps.1.clickAlert.container: container picks the container of an Unstick click only (button: unstick)',
    );
    expect(msg).toContain('steps.2.waitFor.alert.machine: unknown machine "kpro9"');
    expect(msg).toContain('steps.3.after.alert: an alert condition needs settings.watch');
    expect(msg).toContain('expect.alerts.0.machine: unknown machine "kpro7"');
    expect(msg).toContain('expect.alerts.0: an alerts expectation needs settings.watch');
  });

  it('an alertmanager step without settings.watch, with no alert, a bad status or an unknown key is refused', () => {
    const msg = problems(`
name: bad
users: [alice]
${FLEET}
steps:
  - { alertmanager: { alerts: [{ labels: { alertname: DcgmXidError, Hostname: kpro5 } }] } }
`);
    expect(msg).toContain('steps.0.alertmanager: an alertmanager step needs settings.watch');
    // Refinements run once the shapes fit: the shapes are told apart first.
    const shapes = problems(`
name: bad
users: [alice]
settings: { watch: { intervalSec: 2 } }
${FLEET}
steps:
  - { alertmanager: { alerts: [{ labels: { alertname: X } }] } }
  - { alertmanager: { alerts: [] } }
  - { alertmanager: { alerts: [{ status: burning, labels: { alertname: X } }] } }
  - { alertmanager: { alerts: [{ labels: { alertname: X }, lables: {} }] } }
`);
    expect(shapes).toContain('steps.1.alertmanager.alerts:');
    expect(shapes).toContain('steps.2.alertmanager.alerts.0.status: must be firing or resolved');
    expect(shapes).toContain('steps.3.alertmanager.alerts.0: Unrecognized key: "lables"');
    expect(shapes).not.toContain('steps.0.');
  });

  it('down and up steps must pair, and nobody types or clicks while the bot is down', () => {
    const msg = problems(`
name: bad
users: [alice]
${FLEET}
steps:
  - { up: worker }
  - { down: bot }
  - { as: alice, command: /gpu status kpro5 }
  - { down: both }
  - { up: bot }
`);
    expect(msg).toContain('steps.0.up: the worker is not down (a down: step must come first)');
    expect(msg).toContain('steps.2: the bot is down here: bring it up first');
    expect(msg).toContain('steps.3.down: the bot is already down');
    expect(msg).toContain('steps: the worker stays down at the end: add an up: step');
  });

  it('a well-formed watch scenario parses, with the alerts channel and interval defaulted', () => {
    const s = parseScenario(`
name: ok
users: [alice]
settings: { watch: { ghostSec: 0 } }
${FLEET}
steps:
  - { waitFor: { alert: { kind: ghost_memory, machine: kpro5, gpu: 1, state: raised } }, timeout: 20s }
  - { as: alice, clickAlert: { kind: ghost_memory, machine: kpro5, gpu: 1, button: snooze-1h } }
  - { as: alice, clickAlert: { kind: ghost_memory, machine: kpro5, button: unstick, container: ct129 }, id: fix }
  - { waitFor: thread-done, incident: fix }
  - { restart: both }
expect:
  alerts: [{ kind: ghost_memory, machine: kpro5, gpu: 1, messages: 1, raised: 1, cleared: false, snoozed: true, minEdits: 1, text: ["GPU 1"] }]
`);
    expect(s.settings.watch).toEqual({ intervalSec: 2, ghostSec: 0, channel: 'C0ALERTS01' });
    expect(s.steps).toHaveLength(5);
  });
});

const control = (o: Partial<Control> & Pick<Control, 'actionId'>): Control => ({
  type: 'button',
  blockId: 'b',
  value: 'inc_alert_x',
  text: '',
  placeholder: undefined,
  options: [],
  ...o,
});

describe('alert clicks pick the control a person would', () => {
  const controls = [
    control({ actionId: 'gpu_alert_status', text: 'Status kpro5' }),
    control({ actionId: 'gpu_alert_snooze_1h', text: 'Snooze 1 h' }),
    control({ actionId: 'gpu_alert_snooze_gpu_1h', text: 'Snooze GPU 3 1 h' }),
    control({
      actionId: 'gpu_alert_unstick_pick',
      type: 'static_select',
      text: 'Unstick a container…',
      value: null,
      options: [
        { text: { type: 'plain_text', text: 'ct129' }, value: 'inc_alert_x|ct129' },
        { text: { type: 'plain_text', text: 'ct130' }, value: 'inc_alert_x|ct130' },
      ],
    }),
  ];

  it("snooze: the machine's button without gpu, the GPU's with it; a button the message lacks is a clear problem naming what it has", () => {
    expect(pickControl(controls, { button: 'snooze-1h' })).toMatchObject({
      control: { actionId: 'gpu_alert_snooze_1h' },
    });
    expect(pickControl(controls, { button: 'snooze-1h', gpu: 3 })).toMatchObject({
      control: { actionId: 'gpu_alert_snooze_gpu_1h' },
    });
    expect(pickControl(controls, { button: 'snooze-1d', gpu: 3 })).toMatchObject({
      reason: expect.stringContaining('has no snooze-1d button for GPU 3'),
    });
    expect(pickControl(controls, { button: 'snooze-1d' })).toMatchObject({
      reason: expect.stringContaining('it has: gpu_alert_status, gpu_alert_snooze_1h'),
    });
  });

  it("unstick on a host alert: the pick's option for the container; without one, or for a container it does not offer, a clear problem", () => {
    expect(pickControl(controls, { button: 'unstick', container: 'ct130' })).toMatchObject({
      option: { value: 'inc_alert_x|ct130' },
    });
    expect(pickControl(controls, { button: 'unstick' })).toMatchObject({
      reason: expect.stringContaining('say which with container:'),
    });
    expect(pickControl(controls, { button: 'unstick', container: 'ct131' })).toMatchObject({
      reason: expect.stringContaining('offers no ct131'),
    });
    expect(
      pickControl([control({ actionId: 'gpu_alert_unstick', text: 'Unstick ct129' })], {
        button: 'unstick',
        container: 'ct129',
      }),
    ).toMatchObject({ reason: expect.stringContaining('is a button') });
  });
});

const episode = (o: Partial<AlertReport> & Pick<AlertReport, 'id'>): AlertReport => ({
  key: 'kpro5/ram_high',
  kind: 'ram_high',
  machine: 'kpro5',
  gpu: null,
  createdAt: '2026-12-01T12:00:00.000Z',
  raised: 1,
  updated: 0,
  cleared: false,
  snoozed: 0,
  actions: 0,
  messages: [{ ts: '1.000001', text: 'Alert: kpro5: host RAM 98 % used', edits: 0 }],
  events: [{ id: '1-0', type: 'alert_raised', at: '2026-12-01T12:00:00.000Z' }],
  ...o,
});

describe('the alerts expectation', () => {
  const channel = { channel: 'C0ALERTS01', unclaimed: [] };
  it('passes one message per episode, raised once, with the counts and text asked for', () => {
    const r = checkAlerts(
      [{ kind: 'ram_high', machine: 'kpro5', messages: 1, raised: 1, cleared: false, text: ['98 %'] }],
      { alerts: [episode({ id: 'inc_alert_a' })], alertsChannel: channel },
    );
    expect(r.filter((x) => !x.ok)).toEqual([]);
    expect(r.map((x) => x.check)).toContain('alert ram_high on kpro5: text /98 %/');
  });

  it('fails a doubled message, a second raise, an episode raised while the last was open, and a stray message', () => {
    const doubled = episode({
      id: 'inc_alert_a',
      messages: [
        { ts: '1.1', text: 'a', edits: 0 },
        { ts: '1.2', text: 'a', edits: 0 },
      ],
    });
    const twice = episode({ id: 'inc_alert_b', raised: 2, createdAt: '2026-12-01T12:01:00.000Z' });
    const r = checkAlerts([{ kind: 'ram_high', machine: 'kpro5', messages: 1 }], {
      alerts: [doubled, twice],
      alertsChannel: { channel: 'C0ALERTS01', unclaimed: [{ ts: '9.9', text: 'who posted this' }] },
    });
    const failed = r.filter((x) => !x.ok).map((x) => x.check);
    expect(failed).toEqual([
      'each alert episode is one message, raised once',
      'no alert raised again while it was open',
      'no message in the alerts channel that no incident claims',
      'alert ram_high on kpro5: 1 message(s)',
    ]);
  });
});

describe('the alerts expectation with two sources of one condition', () => {
  const channel = { channel: 'C0ALERTS01', unclaimed: [] };
  const raisedBy = (key: string, at: string) => ({ id: at, type: 'alert_raised', at, alert: { key } });
  it('passes the watchdog and Alertmanager each raising it once into one message, fails one source raising it twice', () => {
    const joined = episode({
      id: 'inc_alert_j',
      raised: 2,
      events: [raisedBy('kpro5/ghost_memory/gpu5', '1-0'), raisedBy('alertmanager:abc', '2-0')],
    });
    expect(checkAlerts([], { alerts: [joined], alertsChannel: channel }).filter((x) => !x.ok)).toEqual([]);
    const doubled = episode({
      id: 'inc_alert_d',
      raised: 2,
      events: [raisedBy('alertmanager:abc', '1-0'), raisedBy('alertmanager:abc', '2-0')],
    });
    expect(
      checkAlerts([], { alerts: [doubled], alertsChannel: channel })
        .filter((x) => !x.ok)
        .map((x) => x.check),
    ).toEqual(['each alert episode is one message, raised once']);
  });
});

describe('the runner on the real stack', () => {
  it('restart: both: the worker process is SIGKILLed and a new one and a new bot answer the next command', async () => {
    const r = await runScenario(
      parseScenario(`
name: restart both
users: [alice]
fleet:
  hosts: [{ id: kpro5, gpus: 2 }]
steps:
  - { as: alice, command: /gpu status kpro5, id: before }
  - { waitFor: thread-done, incident: before, timeout: 60s }
  - { restart: both }
  - { as: alice, command: /gpu status kpro5, id: after }
  - { waitFor: thread-done, incident: after, timeout: 60s }
expect:
  allFinished: true
`),
    );
    expectRunClean(r);
    const restart = r.steps[2]?.result ?? {};
    expect(restart.restarted).toBe('both');
    expect(typeof restart.killedPid).toBe('number');
    expect(typeof restart.newPid).toBe('number');
    expect(restart.newPid).not.toBe(restart.killedPid);
    expect(r.incidents.filter((i) => i.kind === 'status' && i.finished)).toHaveLength(2);
  }, 240_000);

  it('alert conditions and the alerts report follow an alert episode the bot renders in the alerts channel; a click on an alert never raised is a problem', async () => {
    const rt = await ScenarioRuntime.start(
      parseScenario(`
name: seeded alert
users: [alice]
settings: { watch: { intervalSec: 3600 } }
fleet:
  hosts: [{ id: kpro5, gpus: 2 }]
steps: [{ wait: 0 }]
`),
    );
    try {
      const since = Date.now();
      const alert: Alert = {
        key: 'kpro5/ram_high',
        kind: 'ram_high',
        machineId: 'kpro5',
        gpu: null,
        since,
        raisedAt: since,
        sentence: 'host RAM 95 % used (427 of 449 GiB).',
        lastSeenAt: since,
      };
      const id = alertIncidentId(alert);
      const at = () => new Date().toISOString();
      await rt.log.create({
        id,
        kind: 'alert',
        requester: WATCHDOG_REQUESTER,
        channel: 'C0ALERTS01',
        targets: ['kpro5'],
        text: alert.key,
        reason: null,
        createdAt: new Date(since).toISOString(),
      });
      const cond = (state: 'raised' | 'updated' | 'cleared') => ({
        alert: { kind: 'ram_high' as const, machine: 'kpro5', state },
      });
      expect(await rt.holds(cond('raised'), null)).toBe(false);
      await rt.log.append(id, { type: 'alert_raised', at: at(), alert });
      expect(await rt.waitFor(cond('raised'), null, 30_000)).toBe(true);
      expect(await rt.holds(cond('updated'), null)).toBe(false);
      await rt.log.append(id, {
        type: 'alert_updated',
        at: at(),
        alert: { ...alert, sentence: 'host RAM 98 % used (439 of 449 GiB).' },
      });
      expect(await rt.waitFor(cond('updated'), null, 30_000)).toBe(true);
      const click = await rt.clickAlert('alice', { kind: 'ram_high', machine: 'kpro5', gpu: 2, button: 'snooze-1d' });
      expect(click.sent).toBe(false);
      expect(click.reason).toMatch(/no ram_high alert on kpro5 GPU 2 was raised/);
      await rt.log.append(id, { type: 'alert_cleared', at: at(), alert });
      expect(await rt.waitFor(cond('cleared'), null, 30_000)).toBe(true);
      const c = await rt.collect();
      expect(c.alerts).toHaveLength(1);
      expect(c.alerts[0]).toMatchObject({
        id,
        key: 'kpro5/ram_high',
        kind: 'ram_high',
        machine: 'kpro5',
        raised: 1,
        updated: 1,
        cleared: true,
      });
      expect(c.alerts[0]?.messages).toHaveLength(1);
      expect(c.alerts[0]?.messages[0]?.edits).toBeGreaterThanOrEqual(1);
      const checks = checkAlerts(
        [{ kind: 'ram_high', machine: 'kpro5', messages: 1, raised: 1, cleared: true, minEdits: 1 }],
        c,
      );
      expect(checks.filter((x) => !x.ok)).toEqual([]);
    } finally {
      await rt.stop();
    }
  }, 120_000);
});
