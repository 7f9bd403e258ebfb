/**
 * The demo's web page, headless: plain HTTP requests against a running demo (S1's fleet, the
 * real bot, worker, Redis and fake Slack). No browser.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDemo, type Demo, type DemoState } from './demo-server.ts';

const HERE = dirname(fileURLToPath(import.meta.url));

describe('demo web page', () => {
  let demo: Demo;
  beforeAll(async () => {
    demo = await startDemo(join(HERE, 's1-healthy-host.yaml'));
  });
  afterAll(async () => {
    await demo?.close();
  });

  it('GET / returns the page', async () => {
    const r = await fetch(demo.url);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toContain('text/html');
    const html = await r.text();
    expect(html).toContain('<title>gpu-medic demo</title>');
    expect(html).toContain("fetch('/state')");
  });

  it('the page shows message text as Slack would: Slack’s entities decoded once, then HTML-escaped once; own mentions as @id', async () => {
    const html = await (await fetch(demo.url)).text();
    const defs = ['esc', 'slackText'].map((name) => new RegExp(`^const ${name} = .*;$`, 'm').exec(html)?.[0] ?? '');
    expect(defs.every((d) => d !== '')).toBe(true);
    const slackText = new Function(`${defs.join('\n')}\nreturn slackText;`)() as (s: string) => string;
    // What src/render/escape.ts made of "<!channel> &lt; x" typed by a user, and a mention gpu-medic wrote.
    expect(slackText('reason: &lt;!channel&gt; &amp;lt; x · by <@U0REQUEST>')).toBe(
      'reason: &lt;!channel&gt; &amp;lt; x · by @U0REQUEST',
    );
    expect(slackText('<img src=x onerror=alert(1)>')).toBe('&lt;img src=x onerror=alert(1)&gt;');
  });

  it('POST /command queues the command as the chosen user; GET /state shows the thread', async () => {
    const bad = await fetch(new URL('/command', demo.url), {
      method: 'POST',
      body: JSON.stringify({ user: 'mallory', text: '/gpu status kpro5' }),
    });
    expect(bad.status).toBe(400);
    const r = await fetch(new URL('/command', demo.url), {
      method: 'POST',
      body: JSON.stringify({ user: 'alice', text: '/gpu status kpro5' }),
    });
    expect(r.status).toBe(202);
    expect(await r.json()).toEqual({ queued: true, user: 'alice', text: '/gpu status kpro5' });
    let s: DemoState | null = null;
    for (let i = 0; i < 200; i++) {
      s = (await (await fetch(new URL('/state', demo.url))).json()) as DemoState;
      if (s.threads[0]?.parent.text.includes('done') && s.threads[0].replies.length > 0) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    expect(s?.users).toEqual([{ name: 'alice', id: 'U0ALICE' }]);
    expect(s?.threads).toHaveLength(1);
    expect(s?.threads[0]?.parent.text).toContain('<@U0ALICE>');
    expect(s?.threads[0]?.replies[0]?.text).toContain('RAM: 12 / 449 GiB');
    expect(s?.private.some((n) => n.user === 'alice' && n.kind === 'ack' && n.text.includes('incident'))).toBe(true);
    expect(s?.gpuMemory.kpro5).toHaveLength(8);
  });

  it('POST /click without a card answers 409 and says why', async () => {
    const r = await fetch(new URL('/click', demo.url), {
      method: 'POST',
      body: JSON.stringify({ user: 'alice', which: 'approve' }),
    });
    expect(r.status).toBe(409);
    expect(((await r.json()) as { text: string }).text).toContain('no approval card');
  });
});
