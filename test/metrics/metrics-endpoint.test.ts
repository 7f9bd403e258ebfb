import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IncidentLog } from '../../src/incident/log.ts';
import { buttonsOf } from '../faults/unstick-rig.ts';
import { blockActionPayload, sendInteraction } from '../harness/slack/signed-request.ts';
import { startStack, type Stack } from '../harness/stack.ts';

/**
 * The Prometheus endpoint read over HTTP while real status and unstick incidents run through the
 * stack (real Redis, sshd fleet, Bolt, fake Slack): each counter moves by what the fleet, the
 * fake Slack and the durable incident log say happened, no more.
 */
const OPS = 'C0ONCALL01';
const ALICE = 'U0ALICE001';
const BOB = 'U0BOB00001';

type Series = Array<{ name: string; labels: Record<string, string>; value: number }>;

function parse(text: string): Series {
  const out: Series = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m?.[1] || m[3] === undefined) throw new Error(`unparsable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1] ?? ''] = l[2] ?? '';
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

/** Sum of the series called `name` whose labels include `labels`. */
function sum(s: Series, name: string, labels: Record<string, string> = {}): number {
  return s
    .filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))
    .reduce((a, x) => a + x.value, 0);
}

let s: Stack;
async function scrape(): Promise<Series> {
  const res = await fetch(String(s.metricsUrl));
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parse(await res.text());
}
/** Scrapes until `ready` holds (bounded), then returns that scrape; the assertions that follow are exact. */
async function scrapeUntil(ready: (s: Series) => boolean): Promise<Series> {
  let last = await scrape();
  for (let i = 0; i < 50 && !ready(last); i++) {
    await new Promise((r) => setTimeout(r, 100));
    last = await scrape();
  }
  return last;
}
const sshCount = (machine: string): number => s.fleet.commandLog(machine).filter((c) => c.via === 'ssh').length;
const okCalls = (method: string): number =>
  s.slack.calls(method).filter((c) => c.status === 200 && (c.response as { ok?: boolean }).ok === true).length;

beforeAll(async () => {
  s = await startStack({
    fleet: {
      hosts: [
        { id: 'kpro5', gpus: 4 },
        { id: 'kpro6', gpus: 1 },
      ],
      containers: [{ id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true }],
    },
    metrics: true,
    env: {
      GPU_MEDIC_APPROVERS: BOB,
      GPU_MEDIC_TERM_GRACE_SEC: '1',
      GPU_MEDIC_RELEASE_TIMEOUT_SEC: '5',
      GPU_MEDIC_POLL_MS: '300',
    },
    // A non-root container login cannot stop root's holder: the host-level step (approval) is needed.
    tweakInventory: (inv) => {
      const c = inv.containers.find((x) => x.id === 'ct129');
      if (c) c.user = 'fleetuser';
    },
  });
}, 120_000);
afterAll(async () => {
  await s?.stop();
});

describe('Prometheus metrics over HTTP, moved by real incidents', () => {
  it('anything but GET /metrics is 404', async () => {
    const res = await fetch(String(s.metricsUrl).replace('/metrics', '/'));
    expect(res.status).toBe(404);
  });

  it('a status: one incident ok, one status job waited and ran, SSH commands = what the machine received, Slack calls = what the fake Slack answered ok', async () => {
    const before = await scrape();
    const ssh0 = sshCount('kpro5');
    const post0 = okCalls('chat.postMessage');
    const upd0 = okCalls('chat.update');
    const r = await s.slash('status kpro5');
    await s.threadOf(String(r.incidentId));
    await s.quiet();
    // The fake Slack stores a call before the bot has its answer (and counts it): let the last answers land.
    const after = await scrapeUntil(
      (x) =>
        sum(x, 'gpu_medic_slack_api_calls_total', { result: 'ok' }) -
          sum(before, 'gpu_medic_slack_api_calls_total', { result: 'ok' }) >=
        okCalls('chat.postMessage') - post0 + okCalls('chat.update') - upd0,
    );
    const d = (name: string, labels: Record<string, string> = {}) =>
      sum(after, name, labels) - sum(before, name, labels);
    expect(d('gpu_medic_incidents_total', { kind: 'status', outcome: 'ok' })).toBe(1);
    expect(d('gpu_medic_incidents_total')).toBe(1);
    expect(d('gpu_medic_job_wait_seconds_count', { kind: 'status' })).toBe(1);
    expect(d('gpu_medic_job_run_seconds_count', { kind: 'status', result: 'completed' })).toBe(1);
    const sshSeen = sshCount('kpro5') - ssh0;
    expect(sshSeen).toBeGreaterThan(0);
    expect(d('gpu_medic_ssh_commands_total', { machine: 'kpro5' })).toBe(sshSeen);
    expect(d('gpu_medic_ssh_errors_total')).toBe(0);
    expect(d('gpu_medic_slack_api_calls_total', { method: 'chat.postMessage', result: 'ok' })).toBe(
      okCalls('chat.postMessage') - post0,
    );
    expect(d('gpu_medic_slack_api_calls_total', { method: 'chat.update', result: 'ok' })).toBe(
      okCalls('chat.update') - upd0,
    );
    expect(sum(after, 'gpu_medic_queue_jobs', { site: 'default', state: 'active' })).toBe(0);
    expect(after.some((x) => x.name === 'gpu_medic_queue_jobs' && x.labels.state === 'waiting')).toBe(true);
  });

  it('a changed host key: SSH errors by code and machine, nothing ran there, the incident failed', async () => {
    await s.fleet.replaceHostKey('kpro6');
    const before = await scrape();
    const ssh0 = sshCount('kpro6');
    const r = await s.slash('status kpro6');
    await s.threadOf(String(r.incidentId));
    await s.quiet();
    const after = await scrape();
    const d = (name: string, labels: Record<string, string> = {}) =>
      sum(after, name, labels) - sum(before, name, labels);
    expect(sshCount('kpro6')).toBe(ssh0);
    const refused = d('gpu_medic_ssh_errors_total', { code: 'host_key_mismatch', machine: 'kpro6' });
    expect(refused).toBeGreaterThan(0);
    expect(d('gpu_medic_ssh_errors_total')).toBe(refused);
    expect(d('gpu_medic_ssh_commands_total', { machine: 'kpro6', result: 'host_key_mismatch' })).toBe(refused);
    expect(d('gpu_medic_incidents_total', { kind: 'status', outcome: 'failed' })).toBe(1);
  });

  it('Slack answering 429 once and then a platform error once: one rate-limited retry, one failed call the outbox sends again', async () => {
    const before = await scrape();
    s.slack.failNext('chat.postMessage', 1, { status: 429, retryAfterSec: 1 });
    const r1 = await s.slash('status kpro5');
    await s.threadOf(String(r1.incidentId));
    s.slack.failNext('chat.postMessage', 1, { error: 'internal_error' });
    const r2 = await s.slash('status kpro5');
    await s.threadOf(String(r2.incidentId), { timeoutMs: 30000 });
    await s.quiet();
    const after = await scrape();
    const d = (name: string, labels: Record<string, string> = {}) =>
      sum(after, name, labels) - sum(before, name, labels);
    expect(d('gpu_medic_slack_api_retries_total', { method: 'chat.postMessage', reason: 'rate_limited' })).toBe(1);
    expect(d('gpu_medic_slack_api_calls_total', { method: 'chat.postMessage', result: 'internal_error' })).toBe(1);
    expect(d('gpu_medic_slack_api_retries_total', { method: 'chat.postMessage', reason: 'internal_error' })).toBe(1);
    expect(d('gpu_medic_incidents_total', { kind: 'status', outcome: 'ok' })).toBe(2);
  });

  it('an unstick through a host-level approval: approvals, destructive steps, step durations and signals match the incident log and the fleet', async () => {
    const before = await scrape();
    const holder = await s.fleet.spawnHolder('ct129', {
      gpus: [{ index: 0, mib: 96413 }],
      title: 'sglang::scheduler_TP0',
    });
    const r = await s.slash('unstick ct129', { user: ALICE });
    const id = String(r.incidentId);
    const withCard = await s.threadOf(id, { timeoutMs: 40000, done: (t) => t.some((m) => buttonsOf(m).length === 2) });
    const card = withCard.find((m) => buttonsOf(m).length === 2);
    const approve = buttonsOf(card).find((b) => b.action_id === 'gpu_approve');
    if (!card || !approve) throw new Error('no approval card');
    const click = (user: string) =>
      sendInteraction(
        s.eventsUrl,
        s.signingSecret,
        blockActionPayload({
          user,
          channel: OPS,
          messageTs: card.ts,
          threadTs: card.thread_ts ?? card.ts,
          actionId: approve.action_id,
          value: approve.value,
          responseUrl: s.slack.newResponseUrl(),
        }),
      );
    await click(ALICE); // the requester: refused
    await s.slack.waitFor(() => String(s.slack.responses().at(-1)?.body.text ?? '').includes('second person'), 5000);
    await click(BOB);
    await s.threadOf(id, { timeoutMs: 40000, done: (t) => t.some((m) => /Recovered/.test(m.text)) });
    await holder.exited;
    // Not s.quiet(): the approval's expiry job stays delayed on the queue. The incident's end is counted last.
    const after = await scrapeUntil(
      (x) =>
        sum(x, 'gpu_medic_job_run_seconds_count', { kind: 'decision' }) >
        sum(before, 'gpu_medic_job_run_seconds_count', { kind: 'decision' }),
    );
    const d = (name: string, labels: Record<string, string> = {}) =>
      sum(after, name, labels) - sum(before, name, labels);

    expect(d('gpu_medic_approval_decisions_total', { outcome: 'refused', reason: 'self_approval' })).toBe(1);
    expect(d('gpu_medic_approval_decisions_total', { outcome: 'approved' })).toBe(1);
    expect(d('gpu_medic_approval_decisions_total')).toBe(2);
    expect(d('gpu_medic_incidents_total', { kind: 'unstick', outcome: 'ok' })).toBe(1);

    // Every step the log says finished is counted once, under its kind and outcome; every signal likewise.
    const events = await new IncidentLog(s.redis, s.prefix).events(id);
    const kinds = new Map<string, string>();
    const steps = new Map<string, number>();
    const signals = new Map<string, number>();
    for (const e of events) {
      if (e.type === 'step_started') kinds.set(e.stepId, e.kind);
      if (e.type === 'step_finished') {
        const k = `${kinds.get(e.stepId) ?? '?'}/${e.outcome}`;
        steps.set(k, (steps.get(k) ?? 0) + 1);
      }
      if (e.type === 'signalled')
        signals.set(`${e.signal}/${e.result}`, (signals.get(`${e.signal}/${e.result}`) ?? 0) + 1);
    }
    expect(steps.get('host_kill/done')).toBe(1);
    for (const [k, n] of steps) {
      const [kind = '', result = ''] = k.split('/');
      expect(d('gpu_medic_destructive_steps_total', { kind, result })).toBe(n);
      expect(d('gpu_medic_step_duration_seconds_count', { kind, outcome: result })).toBe(n);
    }
    expect(d('gpu_medic_destructive_steps_total')).toBe([...steps.values()].reduce((a, n) => a + n, 0));
    for (const [k, n] of signals) {
      const [signal = '', result = ''] = k.split('/');
      expect(d('gpu_medic_signals_total', { signal, result })).toBe(n);
    }
    // ... and the fleet agrees on what was actually delivered.
    expect(d('gpu_medic_signals_total', { signal: 'KILL', result: 'sent' })).toBe(
      s.fleet.signals().filter((x) => x.signal === 'SIGKILL' && x.hostPid === holder.hostPid).length,
    );
    expect(d('gpu_medic_job_run_seconds_count', { kind: 'decision', result: 'completed' })).toBe(1);
  });
});
