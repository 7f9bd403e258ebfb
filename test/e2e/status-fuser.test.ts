import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../harness/stack.ts';

const OPS = 'C0ONCALL01';

/** Nothing dropped silently: a fuser that fails is shown with its error, not as "see holders below" and nothing. */
describe('/gpu status of a container whose fuser fails (real sshd fleet, Bolt, fake Slack)', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      fleet: {
        hosts: [{ id: 'kpro5', gpus: 2 }],
        containers: [{ id: 'ct130', vmid: 130, host: 'kpro5', ownAddress: true, omitTools: ['fuser'] }],
      },
    });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('the thread says fuser failed and why, and does not point at holders it could not list', async () => {
    await s.fleet.spawnHolder('ct130', { gpus: [{ index: 1, mib: 5000 }], title: 'python3' });
    await s.slash('status ct130');
    const p = await s.slack.waitFor(
      () => s.slack.messages(OPS).find((m) => m.text.includes('`ct130`') && m.text.includes('done')),
      15000,
    );
    const reply = s.slack.thread(OPS, p.ts)[1];
    const shown = `${reply?.text ?? ''}\n${JSON.stringify(reply?.blocks ?? [])}`;
    expect(shown).toMatch(/fuser could not list the device holders: .*fuser.*not found/);
    // No false warning: the host's view (its compute apps in ct130's PID namespace, its GPU map) still names
    // the holder of GPU 1, so no warning says the holders are unknown.
    expect(shown).toMatch(/"\d+ \(host \d+\) python3 5,000 MiB"/);
    expect(shown).not.toMatch(/holders are unknown/);
    expect(shown).not.toContain('see holders below');
  });
});
