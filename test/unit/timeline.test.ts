import { describe, expect, it } from 'vitest';
import type { AnyEvent, AnyLoggedEvent } from '../../src/incident/all-events.ts';
import type { IncidentMeta } from '../../src/incident/events.ts';
import { describeEvent, incidentState, renderTimeline } from '../../src/incident/timeline.ts';

const meta = (o: Partial<IncidentMeta> = {}): IncidentMeta => ({
  id: 'inc_20261130_031245_ab12cd34',
  kind: 'unstick',
  requester: 'U0ALICE001',
  channel: 'C0ONCALL01',
  targets: ['ct129'],
  text: 'unstick ct129',
  reason: null,
  createdAt: '2026-11-30T03:12:45.000Z',
  ...o,
});
let n = 0;
const ev = (e: AnyEvent): AnyLoggedEvent => ({ ...e, id: `${++n}-0` });

describe('incident timeline (pure)', () => {
  it('text a user typed cannot forge a line of the record', () => {
    const m = meta({ text: 'unstick ct129\n03:13:00.000  approval apr_x approved by U0BOSS0001', reason: 'x\r\ny' });
    const out = renderTimeline(m, [ev({ type: 'requested', at: '2026-11-30T03:12:45.000Z' })]);
    const lines = out.trimEnd().split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[3]).toBe(
      '03:12:45.000  requested by U0ALICE001 in C0ONCALL01: "unstick ct129 03:13:00.000  approval apr_x approved by U0BOSS0001" (reason: x y)',
    );
  });

  it('state follows the log: queued, running, waiting for a pending approval, then decided', () => {
    const m = meta();
    const requested = ev({ type: 'requested', at: '2026-11-30T03:12:45.000Z' });
    expect(incidentState(m, [requested])).toBe('queued');
    const started = ev({ type: 'started', at: '2026-11-30T03:12:45.100Z', worker: 'w1' });
    expect(incidentState(m, [requested, started])).toBe('running');
    const step = {
      id: 's1',
      tier: 2,
      kind: 'host_kill',
      machineId: 'kpro5',
      targets: [],
      gpus: [],
      commands: [],
      explanation: '',
      graceMs: 0,
      releaseTimeoutMs: 0,
      pollIntervalMs: 0,
    } as const;
    const asked = ev({
      type: 'approval_requested',
      at: '2026-11-30T03:12:50.000Z',
      approvalId: 'apr_1',
      stepId: 's1',
      expiresAt: '2026-11-30T03:27:50.000Z',
      planHash: 'h',
      host: 'kpro5',
      vmid: 129,
      step: { ...step, targets: [], gpus: [], commands: [] },
    });
    const withCard = [requested, started, asked];
    expect(incidentState(m, withCard)).toBe('waiting for approval apr_1');
    const expired = ev({ type: 'approval_expired', at: '2026-11-30T03:27:50.000Z', approvalId: 'apr_1', stepId: 's1' });
    expect(incidentState(m, [...withCard, expired])).toBe('running');
    const fin = ev({ type: 'finished', at: '2026-11-30T03:27:51.000Z', outcome: 'failed', durationMs: 906_000 });
    expect(incidentState(m, [...withCard, expired, fin])).toBe('finished (failed)');
    expect(renderTimeline(m, [...withCard, expired, fin])).toContain('03:27:51.000  finished: failed after 906.0 s');
  });

  it('a status incident is done once every target was read, ok or not', () => {
    const m = meta({ kind: 'status_all', targets: ['kpro5', 'kpro6'] });
    const err = ev({
      type: 'machine_error',
      at: '2026-11-30T03:12:46.000Z',
      machineId: 'kpro6',
      code: 'connect_timeout',
      message: 'no answer in 8 s',
      commands: [],
    });
    expect(incidentState(m, [err])).toBe('queued');
    const err5 = ev({
      type: 'machine_error',
      at: '2026-11-30T03:12:46.000Z',
      machineId: 'kpro5',
      code: 'auth_failed',
      message: 'refused',
      commands: [],
    });
    expect(incidentState(m, [err, err5])).toBe('done');
  });

  it('a status whose GPUs answered an error is shown for what it is, never "finished (ok)" alone', () => {
    const m = meta({ kind: 'status', targets: ['kpro5'] });
    const snapshot = {
      machineId: 'kpro5',
      view: 'host' as const,
      takenAt: '2026-11-30T03:12:46.000Z',
      gpus: [],
      processes: [],
      holders: [],
      kernelMounts: [],
      ram: null,
      gpuError: {
        kind: 'gpu_lost' as const,
        message: 'Unable to determine the device handle for GPU0000:38:00.0: GPU is lost',
        busId: '00000000:38:00.0',
      },
    };
    const read = ev({ type: 'snapshot', at: '2026-11-30T03:12:46.000Z', label: 'status', snapshot, commands: [] });
    expect(incidentState(m, [read])).toBe('done · GPU error on kpro5: GPU is lost');
    // Even a log written by an older worker that called it ok.
    const fin = ev({ type: 'finished', at: '2026-11-30T03:12:47.000Z', outcome: 'ok', durationMs: 900 });
    expect(incidentState(m, [read, fin])).toBe('finished (ok) · GPU error on kpro5: GPU is lost');
  });

  it('the verdict line says what others changed apart from what the incident freed', () => {
    const verdict = {
      kind: 'recovered' as const,
      title: 'Recovered',
      gpus: [],
      totalFreedMiB: 50_000,
      outside: ['GPU 1: 60,000 MiB freed outside this incident.'],
      nextStep: null,
    };
    const out = describeEvent(meta(), ev({ type: 'verdict', at: '2026-11-30T03:13:00.000Z', verdict }));
    expect(out).toBe(
      'verdict: Recovered, 50,000 MiB freed by this incident; outside it: GPU 1: 60,000 MiB freed outside this incident.',
    );
  });

  it('a reminder and an escalation are lines of the record naming who was pinged; the state stays waiting', () => {
    const m = meta();
    const step = {
      id: 's1',
      tier: 2,
      kind: 'host_kill',
      machineId: 'kpro5',
      targets: [],
      gpus: [],
      commands: [],
      explanation: '',
      graceMs: 0,
      releaseTimeoutMs: 0,
      pollIntervalMs: 0,
    } as const;
    const asked = ev({
      type: 'approval_requested',
      at: '2026-11-30T03:12:50.000Z',
      approvalId: 'apr_1',
      stepId: 's1',
      expiresAt: '2026-11-30T03:27:50.000Z',
      planHash: 'h',
      host: 'kpro5',
      vmid: 129,
      step: { ...step, targets: [], gpus: [], commands: [] },
    });
    const reminded = ev({
      type: 'approval_reminded',
      at: '2026-11-30T03:20:20.000Z',
      approvalId: 'apr_1',
      stepId: 's1',
      pinged: ['U0BOB00001', 'U0DAVE0001'],
      expiresAt: '2026-11-30T03:27:50.000Z',
    });
    const escalated = ev({
      type: 'approval_escalated',
      at: '2026-11-30T03:22:50.000Z',
      approvalId: 'apr_1',
      stepId: 's1',
      pinged: ['U0ERIN0001'],
      expiresAt: '2026-11-30T03:27:50.000Z',
    });
    expect(describeEvent(m, reminded)).toBe(
      'approval apr_1 still undecided at half its time: reminded U0BOB00001, U0DAVE0001 (expires 2026-11-30T03:27:50.000Z)',
    );
    expect(describeEvent(m, escalated)).toBe(
      'approval apr_1 escalated to U0ERIN0001, who may decide it too from now on (expires 2026-11-30T03:27:50.000Z)',
    );
    expect(incidentState(m, [asked, reminded, escalated])).toBe('waiting for approval apr_1');
  });
});
