/**
 * The demo's web page, headless: plain HTTP requests against a running demo (S1's fleet, and the
 * seed incident's with its watchdog; the real bot, worker, Redis and fake Slack). No browser: the
 * page's own block renderer is taken from the page and run here.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDemo, type Demo, type DemoMessage, type DemoState } from './demo-server.ts';

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

/** The block renderer the page runs, taken from the page itself. */
function pageRenderer(html: string): (blocks: unknown[]) => string {
  const src = /^(function demoBlocksHtml\(blocks\)[\s\S]*?)\nfunction blocksHtml\(/m.exec(html)?.[1];
  if (src === undefined) throw new Error('the page has no demoBlocksHtml');
  return new Function(`const __name = (f) => f;\n${src}\nreturn demoBlocksHtml;`)() as (blocks: unknown[]) => string;
}

async function until<T>(demo: Demo, f: (s: DemoState) => T | undefined | null | false, what: string): Promise<T> {
  for (let i = 0; i < 600; i++) {
    const v = f((await (await fetch(new URL('/state', demo.url))).json()) as DemoState);
    if (v) return v;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`not reached in 60 s: ${what}`);
}

const post = (demo: Demo, path: string, body: unknown) =>
  fetch(new URL(path, demo.url), { method: 'POST', body: JSON.stringify(body) });

describe('demo web page: the watchdog’s alerts and the App Home', () => {
  let demo: Demo;
  let render: (blocks: unknown[]) => string;
  beforeAll(async () => {
    demo = await startDemo(join(HERE, 'demo-seed-incident.yaml'));
    render = pageRenderer(await (await fetch(demo.url)).text());
  }, 120_000);
  afterAll(async () => {
    await demo?.close();
  });

  const ramAlert = (s: DemoState) => s.alerts.find((m) => m.text.includes('Host RAM high') && m.blocks.length > 0);
  const allAlertMessages = (s: DemoState): DemoMessage[] => s.alerts.flatMap((m) => [m, ...m.replies]);

  it('an alert message shows the bot’s Status, Unstick and Snooze controls; Status opens a status thread as the chosen user', async () => {
    const alert = await until(demo, ramAlert, 'a RAM alert with blocks');
    const html = render(alert.blocks);
    const status =
      /<button class="act" data-action-id="gpu_alert_status" data-block-id="([^"]+)"[^>]*>Status kpro5<\/button>/.exec(
        html,
      );
    expect(status).not.toBeNull();
    expect(html).toMatch(
      /<select class="act" data-action-id="gpu_alert_unstick_pick"[^>]*>.*<option value="[^"]+\|ct129">ct129<\/option>/,
    );
    expect(html).toContain('>Snooze 1 h</button>');
    const forged = await post(demo, '/action', {
      user: 'alice',
      ts: alert.ts,
      actionId: 'gpu_approve',
      blockId: status?.[1],
    });
    expect(forged.status).toBe(409);
    const r = await post(demo, '/action', {
      user: 'alice',
      ts: alert.ts,
      actionId: 'gpu_alert_status',
      blockId: status?.[1],
    });
    expect(r.status).toBe(200);
    const opened = await until(
      demo,
      (s) => allAlertMessages(s).find((m) => m.ts !== alert.ts && m.text.includes('<@U0ALICE>')),
      'a status incident opened by alice in the alerts channel',
    );
    expect(render(opened.blocks)).toContain('@U0ALICE');
  }, 90_000);

  it('Snooze on the ghost-memory alert, clicked through the page’s route, snoozes it as the chosen user', async () => {
    const ghost = await until(
      demo,
      (s) => s.alerts.find((m) => m.text.includes('GPU memory held with no process') && m.blocks.length > 0),
      'a ghost-memory alert with blocks',
    );
    const snooze =
      /<button class="act" data-action-id="gpu_alert_snooze_gpu_1h" data-block-id="([^"]+)"[^>]*>Snooze GPU 5 1 h<\/button>/.exec(
        render(ghost.blocks),
      );
    expect(snooze).not.toBeNull();
    const r = await post(demo, '/action', {
      user: 'bob',
      ts: ghost.ts,
      actionId: 'gpu_alert_snooze_gpu_1h',
      blockId: snooze?.[1],
    });
    expect(r.status).toBe(200);
    const snoozed = await until(
      demo,
      (s) => s.alerts.find((m) => m.ts === ghost.ts && m.text.includes(':zzz:')),
      'the alert edited to say it is snoozed',
    );
    expect(render(snoozed.blocks)).toMatch(/:zzz: .*GPU 5.* snoozed until .* by <span class="mention">@U0BOB<\/span>/);
  }, 90_000);

  it('POST /home opens the chosen user’s Home tab; the bot’s published view is in the state and drawn by the page', async () => {
    const r = await post(demo, '/home', { user: 'bob' });
    expect(r.status).toBe(200);
    const home = await until(demo, (s) => s.home.find((h) => h.user === 'bob'), 'bob’s App Home');
    expect(home.id).toBe('U0BOB');
    const html = render(home.blocks);
    expect(html).toMatch(/<code>kpro5<\/code> · 8 GPUs/);
    expect(html).toContain('RAM');
    expect((await (await fetch(demo.url)).text()).includes('id="openHome"')).toBe(true);
  }, 90_000);
});
