import { describe, expect, it } from 'vitest';
import { parseEnv } from '../../src/config/env.ts';
import { validateInventory } from '../../src/config/load-inventory.ts';
import { findMachine, routeFor } from '../../src/config/machines.ts';

const FP = `SHA256:${'A'.repeat(43)}`;

describe('inventory', () => {
  const good = {
    defaults: { keyFile: '/keys/id' },
    hosts: [{ id: 'kpro5', address: '10.1.2.6', hostKeys: [FP] }],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', address: '10.1.230.172', hostKeys: [FP] },
      { id: 'ct130', vmid: 130, host: 'kpro5' },
    ],
  };
  it('accepts a good inventory and routes containers', () => {
    const r = validateInventory(good);
    expect(r.problems).toEqual([]);
    const inv = r.inventory;
    if (!inv) throw new Error('no inventory');
    expect(findMachine(inv, 'ct129')).toMatchObject({ kind: 'container', vmid: 129, site: 'default' });
    expect(routeFor(inv, 'ct129')).toMatchObject({
      kind: 'direct',
      endpoint: { host: '10.1.230.172', port: 22, username: 'root' },
    });
    expect(routeFor(inv, 'ct130')).toMatchObject({ kind: 'pct', vmid: 130, host: { host: '10.1.2.6' } });
    expect(routeFor(inv, 'nope')).toBeNull();
  });
  it('lists every problem at once, with where', () => {
    const r = validateInventory({
      hosts: [
        { id: 'kpro5', address: '10.1.2.6', hostKeys: ['MD5:aa'] },
        { id: 'Bad Id', address: 'x;y', hostKeys: [] },
      ],
    });
    expect(r.inventory).toBeNull();
    const msgs = r.problems.map((p) => `${p.at}: ${p.message}`);
    expect(msgs).toContainEqual(expect.stringMatching(/^host kpro5: hostKeys\[0\] must be a SHA256/));
    expect(msgs).toContainEqual(expect.stringMatching(/^host "Bad Id": id must be lower-case/));
    expect(msgs).toContainEqual(
      expect.stringMatching(/^host "Bad Id": address must be a hostname or IP address \(it is "x;y"\)/),
    );
    expect(msgs).toContainEqual(
      expect.stringMatching(/^host "Bad Id": hostKeys must list at least one pinned fingerprint/),
    );
  });
  it('catches cross-reference mistakes', () => {
    const r = validateInventory({
      hosts: [{ id: 'kpro5', address: 'h', hostKeys: [FP] }],
      containers: [
        { id: 'kpro5', vmid: 129, host: 'nohost' },
        { id: 'ct1', vmid: 131, host: 'kpro5', address: '10.0.0.1' },
      ],
    });
    const msgs = r.problems.map((p) => `${p.at}: ${p.message}`).join('\n');
    expect(msgs).toContain('host kpro5: has no keyFile');
    expect(msgs).toContain('container kpro5: id "kpro5" is used twice');
    expect(msgs).toContain('container kpro5: host "nohost" is not in hosts');
    expect(msgs).toContain('container ct1: has its own address, so it needs its own pinned hostKeys');
  });
});

describe('env', () => {
  it('requires the tokens of the mode, per role', () => {
    expect(
      parseEnv({}, 'bot')
        .problems.map((p) => p.variable)
        .sort(),
    ).toEqual(['SLACK_APP_TOKEN', 'SLACK_BOT_TOKEN']);
    expect(
      parseEnv({ GPU_MEDIC_MODE: 'http', SLACK_BOT_TOKEN: 'xoxb-1' }, 'bot').problems.map((p) => p.variable),
    ).toEqual(['SLACK_SIGNING_SECRET']);
    expect(parseEnv({}, 'worker').problems).toEqual([]);
  });
  it('the bot refuses an alerts channel that GPU_MEDIC_ALLOWED_CHANNELS leaves out (every click on an alert would be refused); the worker does not mind', () => {
    const base = { SLACK_BOT_TOKEN: 'xoxb-1', SLACK_APP_TOKEN: 'xapp-1', GPU_MEDIC_ALERTS_CHANNEL: 'C0ALERTS01' };
    const r = parseEnv({ ...base, GPU_MEDIC_ALLOWED_CHANNELS: 'C0ONCALL01' }, 'bot');
    expect(r.env).toBeNull();
    expect(r.problems).toEqual([
      {
        variable: 'GPU_MEDIC_ALERTS_CHANNEL',
        message:
          "C0ALERTS01 is not in GPU_MEDIC_ALLOWED_CHANNELS, so every click on an alert's buttons would be refused there; add it to GPU_MEDIC_ALLOWED_CHANNELS (or leave that empty: any channel)",
      },
    ]);
    expect(parseEnv({ ...base, GPU_MEDIC_ALLOWED_CHANNELS: 'C0ONCALL01,C0ALERTS01' }, 'bot').problems).toEqual([]);
    expect(parseEnv(base, 'bot').problems).toEqual([]);
    expect(
      parseEnv({ GPU_MEDIC_ALERTS_CHANNEL: 'C0ALERTS01', GPU_MEDIC_ALLOWED_CHANNELS: 'C0ONCALL01' }, 'worker').problems,
    ).toEqual([]);
  });
  it('refuses approvers given by name', () => {
    const r = parseEnv({ GPU_MEDIC_APPROVERS: 'U012AB,@alice' }, 'worker');
    expect(r.env).toBeNull();
    expect(r.problems[0]?.variable).toBe('GPU_MEDIC_APPROVERS');
  });
  it('refuses an escalation that could never happen, saying why; accepts one that can', () => {
    const msg = (e: Record<string, string>) => parseEnv(e, 'worker').problems.map((p) => `${p.variable} ${p.message}`);
    expect(msg({ GPU_MEDIC_ESCALATION_APPROVERS: 'U0ERIN0001' })).toEqual([
      'GPU_MEDIC_ESCALATE_AFTER_SEC is 0, so the escalation group (GPU_MEDIC_ESCALATION_APPROVERS) would never be asked: set how many seconds a card waits before it escalates, or remove the group',
    ]);
    expect(msg({ GPU_MEDIC_ESCALATE_AFTER_SEC: '300' })).toEqual([
      'GPU_MEDIC_ESCALATION_APPROVERS is empty, so a card has nobody to escalate to after GPU_MEDIC_ESCALATE_AFTER_SEC: name the group (Slack user IDs), or set the delay to 0',
    ]);
    expect(
      msg({
        GPU_MEDIC_ESCALATION_APPROVERS: 'U0ERIN0001',
        GPU_MEDIC_ESCALATE_AFTER_SEC: '900',
        GPU_MEDIC_APPROVAL_TTL_SEC: '900',
      }),
    ).toEqual([
      'GPU_MEDIC_ESCALATE_AFTER_SEC (900 s) is not shorter than GPU_MEDIC_APPROVAL_TTL_SEC (900 s): every card would expire before it escalates',
    ]);
    const ok = parseEnv(
      { GPU_MEDIC_ESCALATION_APPROVERS: 'U0ERIN0001', GPU_MEDIC_ESCALATE_AFTER_SEC: '300' },
      'worker',
    );
    expect(ok.problems).toEqual([]);
    expect(ok.env).toMatchObject({ GPU_MEDIC_ESCALATION_APPROVERS: ['U0ERIN0001'], GPU_MEDIC_ESCALATE_AFTER_SEC: 300 });
  });
});
