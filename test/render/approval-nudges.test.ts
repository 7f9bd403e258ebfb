/**
 * Approvals that don't stall, as the thread shows them: the card's time left ("expires at HH:MM
 * UTC" always, "as of HH:MM: N min left" after each reminder or escalation), the reminder and
 * escalation replies that mention who may decide, and the expiry reply telling the requester
 * what is still held and who can act. Pure: events in, views out.
 */
import { describe, expect, it } from 'vitest';
import { adviceOf, verdictOf } from '../../src/gpu/verdict.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import type { UnstickLoggedEvent } from '../../src/incident/unstick-events.ts';
import { verdictContextOf } from '../../src/incident/verdict-context.ts';
import { EXPIRED_NOTE, minutesLeft } from '../../src/render/approval-nudges.ts';
import { joinRich } from '../../src/text/rich.ts';
import { renderUnstick } from '../../src/render/unstick.ts';
import { planUnstick, stepHash } from '../../src/plan/unstick-plan.ts';
import { s3HostKill } from '../unstick/scenarios.ts';

const INC = 'inc_20261130_092000_k3x9q2';
const APR = 'apr_Qm9vYmFyYmF6cXV4MTIzNA';
const REQ = 'U0REQUEST';
const meta: IncidentMeta = {
  id: INC,
  kind: 'unstick',
  requester: REQ,
  channel: 'C0GPUOPS',
  targets: ['ct129'],
  text: 'ct129',
  reason: null,
  createdAt: '2026-11-30T09:20:00.000Z',
};

type NoId<T> = T extends unknown ? Omit<T, 'id'> : never;
const before = s3HostKill();
const hostKill = planUnstick(before, { incidentId: INC, vmid: 129 }).steps.find((s) => s.kind === 'host_kill');
if (!hostKill) throw new Error('fixture: no host kill');

function withIds(list: Array<NoId<UnstickLoggedEvent>>): UnstickLoggedEvent[] {
  return list.map((e, i): UnstickLoggedEvent => ({ ...e, id: `1764494400000-${i}` }));
}

const requested: NoId<UnstickLoggedEvent> = {
  type: 'approval_requested',
  at: '2026-11-30T09:20:00.000Z',
  approvalId: APR,
  stepId: hostKill.id,
  expiresAt: '2026-11-30T09:35:00.000Z',
  planHash: stepHash(hostKill),
  step: hostKill,
  host: 'kpro5',
  vmid: 129,
  approvers: ['U0APPROV1', 'U0APPROV2'],
  escalation: { approvers: ['U0ESCAL01'], at: '2026-11-30T09:30:00.000Z' },
};
const reminded: NoId<UnstickLoggedEvent> = {
  type: 'approval_reminded',
  at: '2026-11-30T09:27:30.000Z',
  approvalId: APR,
  stepId: hostKill.id,
  pinged: ['U0APPROV1', 'U0APPROV2'],
  expiresAt: '2026-11-30T09:35:00.000Z',
};
const escalated: NoId<UnstickLoggedEvent> = {
  type: 'approval_escalated',
  at: '2026-11-30T09:30:00.000Z',
  approvalId: APR,
  stepId: hostKill.id,
  pinged: ['U0ESCAL01'],
  expiresAt: '2026-11-30T09:35:00.000Z',
};
const expired: NoId<UnstickLoggedEvent> = {
  type: 'approval_expired',
  at: '2026-11-30T09:35:00.000Z',
  approvalId: APR,
  stepId: hostKill.id,
};

const cardOf = (events: UnstickLoggedEvent[]) => renderUnstick(meta, events).find((v) => v.key === `approval:${APR}`);
const repliesOf = (events: UnstickLoggedEvent[]) => renderUnstick(meta, events).filter((v) => v.key.startsWith('ev:'));

describe('minutesLeft', () => {
  it('counts whole minutes left, never more than there are, and says when under a minute is left', () => {
    expect(minutesLeft(Date.parse('2026-11-30T09:35:00Z'), Date.parse('2026-11-30T09:27:30Z'))).toBe('7 min left');
    expect(minutesLeft(Date.parse('2026-11-30T09:35:00Z'), Date.parse('2026-11-30T09:34:00Z'))).toBe('1 min left');
    expect(minutesLeft(Date.parse('2026-11-30T09:35:00Z'), Date.parse('2026-11-30T09:34:30Z'))).toBe(
      'less than a minute left',
    );
    expect(minutesLeft(Date.parse('2026-11-30T09:35:00Z'), Date.parse('2026-11-30T09:36:00Z'))).toBe('no time left');
  });
});

describe('a pending card shows its time left', () => {
  it('before any reminder: the expiry as HH:MM UTC and the escalation to come, no "as of"', () => {
    const card = cardOf(withIds([requested]));
    expect(card?.text).toContain('expires at 09:35 UTC');
    expect(card?.text).toContain('escalates to <@U0ESCAL01> at 09:30 UTC');
    expect(card?.text).not.toContain('as of');
  });
  it('after the reminder: the minutes left as of the reminder', () => {
    const card = cardOf(withIds([requested, reminded]));
    expect(card?.text).toContain('expires at 09:35 UTC · as of 09:27 UTC: 7 min left');
  });
  it('after the escalation: the minutes left as of the escalation, and that the group may decide too', () => {
    const card = cardOf(withIds([requested, reminded, escalated]));
    expect(card?.text).toContain('as of 09:30 UTC: 5 min left');
    expect(card?.text).toContain('escalated at 09:30 UTC: <@U0ESCAL01> may decide too');
    expect(card?.text).not.toContain('escalates to');
  });
});

describe('the reminder and escalation replies', () => {
  it('the reminder mentions each pinged approver, the step, the host and the time left', () => {
    const [reply] = repliesOf(withIds([requested, reminded]));
    expect(reply?.placement).toBe('reply');
    expect(reply?.text).toContain('<@U0APPROV1> <@U0APPROV2>');
    expect(reply?.text).toMatch(/Reminder/);
    expect(reply?.text).toContain('host-level kill on `kpro5`');
    expect(reply?.text).toContain('7 min left as of 09:27 UTC (expires at 09:35 UTC)');
    expect(reply?.text).toContain('Nothing runs until an approver other than <@U0REQUEST> approves');
  });
  it('the escalation mentions the escalation group, how long the card waited, and that they may now decide', () => {
    const [, reply] = repliesOf(withIds([requested, reminded, escalated]));
    expect(reply?.text).toMatch(/Escalated/);
    expect(reply?.text).toContain('<@U0ESCAL01>');
    expect(reply?.text).toContain('waited 10 min with no decision');
    const soon = repliesOf(withIds([requested, { ...escalated, at: '2026-11-30T09:20:12.000Z' }]))[0];
    expect(soon?.text).toContain('waited 12 s with no decision');
    expect(reply?.text).toContain('you may now approve or deny it too');
    expect(reply?.text).toContain('5 min left as of 09:30 UTC (expires at 09:35 UTC)');
  });
  it('a user id that is not one is shown as code, never as a mention', () => {
    const [reply] = repliesOf(withIds([requested, { ...reminded, pinged: ['<!channel>'] }]));
    expect(reply?.text).not.toContain('<!channel>');
    expect(reply?.text).toContain('`&lt;!channel&gt;`');
  });
});

describe('the expiry', () => {
  const still = s3HostKill();
  const list = [requested, reminded, escalated, expired];
  const context = verdictContextOf(withIds(list), ['U0APPROV1', 'U0APPROV2', 'U0ESCAL01'], REQ);
  const verdict: NoId<UnstickLoggedEvent> = {
    type: 'verdict',
    at: '2026-11-30T09:35:01.000Z',
    verdict: verdictOf(before, still, context),
  };

  it('the card says it expired, that nothing ran, and points the requester to the thread', () => {
    const card = cardOf(withIds([...list, verdict]));
    expect(card?.text).toContain(
      '*Expired* at 2026-11-30 09:35:00 UTC without a decision. Nothing from this card was run.',
    );
    expect(card?.blocks.some((b) => b.type === 'actions')).toBe(false);
  });
  it('the reply tells the requester who was asked, that nothing ran, what is still held and who can act', () => {
    const reply = repliesOf(withIds([...list, verdict])).find((v) => /expired/.test(v.text));
    expect(reply?.text).toContain('<@U0REQUEST>');
    expect(reply?.text).toContain('expired at 09:35 UTC with no decision');
    expect(reply?.text).toContain('reminded <@U0APPROV1> <@U0APPROV2>');
    expect(reply?.text).toContain('escalated to <@U0ESCAL01>');
    expect(reply?.text).toContain('nothing from it was run');
    // From the verdict: what is still held (host PIDs on kpro5) and who can act (the approvers, escalation group included).
    expect(reply?.text).toMatch(/What now:.*host-level kill on `?kpro5`? can free it \(host PID \d+/);
    expect(reply?.text).toContain('<@U0ESCAL01>');
    expect(reply?.text).toContain('`/gpu unstick ct129`');
  });
  it('the reply does not repeat the expiry note the worker opens the verdict advice with', () => {
    const noted = {
      ...verdict,
      verdict: { ...verdict.verdict, ...adviceOf(joinRich([[EXPIRED_NOTE], verdict.verdict.advice ?? []], ' ')) },
    } as NoId<UnstickLoggedEvent>;
    const reply = repliesOf(withIds([...list, noted])).find((v) => /expired at/.test(v.text));
    expect(reply?.text).toContain('*What now:* GPU');
    expect(reply?.text).not.toContain(EXPIRED_NOTE);
  });
  it('before the verdict is logged the reply still says what to do', () => {
    const reply = repliesOf(withIds(list)).find((v) => /expired/.test(v.text));
    expect(reply?.text).toContain('*What now:* run `/gpu unstick ct129` again when an approver can answer the card');
  });
});
