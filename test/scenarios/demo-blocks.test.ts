/**
 * The demo page draws a message from its blocks as Slack would (issue 23): mrkdwn (bold, italic,
 * strike, code spans and blocks, links, mentions, Slack's entities decoded once) and rich_text
 * (sections, lists, preformatted, styles, mentions, emoji), every piece HTML-escaped once. Pure:
 * the function the page runs, called here directly.
 */
import { describe, expect, it } from 'vitest';
import type { IncidentMeta } from '../../src/incident/events.ts';
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

  it('a table block and a user element', () => {
    const html = demoBlocksHtml([
      { type: 'table', rows: [[{ type: 'raw_text', text: 'GPU' }], [{ type: 'raw_text', text: '<0>' }]] },
      { type: 'rich_text', elements: [{ type: 'rich_text_section', elements: [{ type: 'user', user_id: 'U0BOB' }] }] },
    ]);
    expect(html).toContain('<table><tr><td>GPU</td></tr><tr><td>&lt;0&gt;</td></tr></table>');
    expect(html).toContain('<span class="mention">@U0BOB</span>');
  });
});
