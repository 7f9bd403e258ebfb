/**
 * The demo page draws a message from its blocks as Slack would (to judge a thread by eye): mrkdwn (bold,
 * italic, strike, code spans and blocks, links, mentions, Slack's entities decoded once) and rich_text
 * (sections, lists, preformatted, styles, mentions, emoji), every piece HTML-escaped once. Pure: the function
 * the page runs, called here directly.
 */
import { describe, expect, it } from 'vitest';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { renderAlert } from '../../src/render/alert.ts';
import { renderHome } from '../../src/render/home.ts';
import { alertIncidentId } from '../../src/watchdog/alert-id.ts';
import type { Alert } from '../../src/watchdog/judge.ts';
import type { UnstickLoggedEvent } from '../../src/incident/unstick-events.ts';
import { planUnstick, stepHash } from '../../src/plan/unstick-plan.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { s3HostKill } from '../unstick/scenarios.ts';
import { demoBlocksHtml } from './demo-blocks.ts';

describe('demo page: blocks drawn as Slack draws them', () => {
  it('mrkdwn: bold, italic, strike, code, a fence, a link and gpu-medic’s own mention; Slack’s entities decoded once, then HTML-escaped', () => {
    const html = demoBlocksHtml([
      {
        type: 'section',
        text: {
          type: 'mrkdwn',
          text: '*Bold* _it_ ~gone~ `co&lt;de` &lt;!here&gt; by <@U0ALICE> <https://x.example/a?b=1&amp;c=2|src>\n```kill &amp; x\nline 2```',
        },
      },
      { type: 'context', elements: [{ type: 'mrkdwn', text: 'alert `inc_1`' }] },
    ]);
    expect(html).toContain(
      '<b>Bold</b> <i>it</i> <s>gone</s> <code>co&lt;de</code> &lt;!here&gt; by <span class="mention">@U0ALICE</span> <a href="https://x.example/a?b=1&amp;c=2">src</a>',
    );
    expect(html).toContain('<pre>kill &amp; x\nline 2</pre>');
    expect(html).toContain('<div class="ctx">alert <code>inc_1</code></div>');
  });

  it('rich_text: the approval card’s hostile cmdline is shown literally (code), its commands preformatted, no markup from the data', () => {
    const evil = '<img src=x onerror=alert(1)> `*b*` &lt;';
    const before = s3HostKill();
    const hostKill = planUnstick(before, { incidentId: 'inc_1', vmid: 129 }).steps.find((s) => s.kind === 'host_kill');
    if (!hostKill) throw new Error('fixture');
    const step = { ...hostKill, targets: hostKill.targets.map((t) => ({ ...t, cmdline: evil })) };
    const meta: IncidentMeta = {
      id: 'inc_1',
      kind: 'unstick',
      requester: 'U0ALICE',
      channel: 'C0',
      targets: ['ct129'],
      text: '',
      reason: null,
      createdAt: '2026-12-01T00:00:00.000Z',
    };
    const events: UnstickLoggedEvent[] = [
      { type: 'requested', at: meta.createdAt, id: '1-0' },
      {
        type: 'approval_requested',
        at: meta.createdAt,
        approvalId: 'apr_1',
        stepId: step.id,
        expiresAt: meta.createdAt,
        planHash: stepHash(step),
        step,
        host: 'kpro5',
        vmid: 129,
        id: '1-1',
      },
    ];
    const card = renderUnstick(meta, events).find((v) => v.key === 'approval:apr_1');
    const html = demoBlocksHtml(card?.blocks ?? []);
    expect(html).toContain('<code>&lt;img src=x onerror=alert(1)&gt; `*b*` &amp;lt;</code>');
    expect(html).not.toContain('<img');
    expect(html).not.toContain('<b>b</b>');
    expect(html).toMatch(/<b>Host-level kill needs a second person<\/b>/);
    expect(html).toMatch(/<ul><li>host PID <b>\d+<\/b>/);
    expect(html).toMatch(/<pre>\[host\] [^<]*KILL/);
    expect(html).toContain(':lock:');
  });

  it('mrkdwn: bold around a code span stays bold; an emoji shortcode with underscores is not italic', () => {
    const html = demoBlocksHtml([
      { type: 'section', text: { type: 'mrkdwn', text: '*`ct129`* · container view · :white_check_mark: done' } },
    ]);
    expect(html).toContain('<b><code>ct129</code></b> · container view · :white_check_mark: done');
  });

  it('a table block and a user element', () => {
    const html = demoBlocksHtml([
      { type: 'table', rows: [[{ type: 'raw_text', text: 'GPU' }], [{ type: 'raw_text', text: '<0>' }]] },
      { type: 'rich_text', elements: [{ type: 'rich_text_section', elements: [{ type: 'user', user_id: 'U0BOB' }] }] },
    ]);
    expect(html).toContain('<table><tr><td>GPU</td></tr><tr><td>&lt;0&gt;</td></tr></table>');
    expect(html).toContain('<span class="mention">@U0BOB</span>');
  });

  const EVIL = '<img src=x onerror=alert(1)> *b* `c` &lt;';
  const T = Date.parse('2026-12-01T03:00:00Z');
  const ramAlert: Alert = {
    key: 'kpro5/ram_high',
    kind: 'ram_high',
    machineId: 'kpro5',
    gpu: null,
    since: T - 600_000,
    raisedAt: T,
    sentence: `host RAM 98 % used; ${EVIL}`,
    lastSeenAt: T,
  };

  it('an alert as the bot renders it: Status, Unstick pick and Snooze as controls carrying their action_id, block_id, value and confirm; its machine text escaped', () => {
    const id = alertIncidentId(ramAlert);
    const meta: IncidentMeta = {
      id,
      kind: 'alert',
      requester: 'watchdog',
      channel: 'C0ALERTS01',
      targets: ['kpro5'],
      text: ramAlert.key,
      reason: null,
      createdAt: new Date(T).toISOString(),
    };
    const [view] = renderAlert(meta, [{ type: 'alert_raised', at: meta.createdAt, alert: ramAlert, id: `${T}-0` }], {
      machines: [
        { id: 'kpro5', kind: 'host' },
        { id: 'ct129', kind: 'container', hostId: 'kpro5' },
      ],
    });
    const html = demoBlocksHtml(view?.blocks ?? []);
    const block = /data-block-id="(gpu_alert_actions_\d+)"/.exec(html)?.[1];
    expect(block).toBeDefined();
    expect(html).toContain(
      `<button class="act" data-action-id="gpu_alert_status" data-block-id="${block}" data-value="${id}">Status kpro5</button>`,
    );
    expect(html).toMatch(
      new RegExp(
        `<select class="act" data-action-id="gpu_alert_unstick_pick" data-block-id="${block}" data-confirm="Unstick\\?\\n[^"]*"><option value="">Unstick a container…</option><option value="${id}\\|ct129">ct129</option></select>`,
      ),
    );
    expect(html).toContain(
      `data-action-id="gpu_alert_snooze_1h" data-block-id="${block}" data-value="${id}">Snooze 1 h</button>`,
    );
    expect(html).toContain('Snooze 1 day</button>');
    expect(html).not.toContain('<img');
    expect(html).not.toContain('<b>b</b>');
  });

  it('the App Home view as the bot renders it: machines and open alerts drawn, machine text escaped', () => {
    const view = renderHome({
      now: T,
      machines: [
        {
          id: 'kpro5',
          glance: {
            machineId: 'kpro5',
            at: T - 60_000,
            ok: true,
            code: null,
            gpus: 8,
            gpuMemoryUsedMiB: 49_152,
            gpuMemoryTotalMiB: 786_432,
            ramPct: 98,
            openAlerts: 1,
          },
        },
      ],
      alerts: [{ incidentId: alertIncidentId(ramAlert), alert: ramAlert, cleared: false, snoozedUntil: null }],
      incidents: [],
      ramPct: 90,
      staleAfterMs: 15 * 60_000,
    });
    const html = demoBlocksHtml(view.blocks);
    expect(html).toMatch(/<code>kpro5<\/code> · 8 GPUs · 49,152 \/ 786,432 MiB GPU memory · RAM 98 %/);
    expect(html).toContain('host RAM 98 % used; &lt;img src=x onerror=alert(1)&gt;');
    expect(html).not.toContain('<img');
    expect(html).not.toContain('<b>b</b>');
  });
});
