/**
 * Every holder is parsed and named correctly (a strange name must not hide or misdirect a kill), on the real
 * sshd fleet: a holder whose comm holds `) ` (`trainer) v2`) or bytes that are not UTF-8 is signalled by the
 * one signal command through each of its paths: perl and python3 on the host and inside a container, and the
 * shell fallback inside a container with neither. Perl once read
 * `/proc/<pid>/stat` from the first `) ` (the holder was refused as "PID reused"); python3
 * decoded it as UTF-8 (it crashed, and later PIDs of the batch got no answer).
 */
import { readlinkSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { withEnvelopes } from '../../src/agent-grammar/envelopes.ts';
import { hostRouteFor, routeFor } from '../../src/config/machines.ts';
import type { ProcessIdentity } from '../../src/gpu/process-ref.ts';
import { sendSignals } from '../../src/unstick-runner/send-signals.ts';
import type { SignalSide } from '../../src/agent-grammar/templates/signal.ts';
import type { ExecResult, Route } from '../../src/ssh/types.ts';
import { runUnstickJob } from '../../workers/unstick.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { ofType, procStart, startRig, type Rig } from './rig.ts';
import { signalEnvelopes } from './signed-signal.ts';

let rig: Rig;

beforeAll(async () => {
  rig = await startRig({
    hosts: [
      { id: 'kpro5', gpus: 8 },
      { id: 'kpro6', gpus: 8, omitTools: ['perl'] },
    ],
    containers: [
      { id: 'ct129', vmid: 129, host: 'kpro5', ownAddress: true },
      { id: 'ct130', vmid: 130, host: 'kpro6', omitTools: ['perl'] },
      { id: 'ct131', vmid: 131, host: 'kpro5', omitTools: ['perl', 'python3'] },
    ],
  });
});

afterEach(async () => {
  for (const p of rig.fleet.processes())
    if (procStart(p.hostPid) === p.startTime && p.containerPid !== 1) await rig.fleet.endProcess(p);
  for (const id of ['ct129', 'ct130', 'ct131']) {
    const holder = await rig.lock.holder(id);
    if (holder) await rig.lock.release(id, holder.incidentId);
  }
});

afterAll(async () => {
  await rig?.stop();
});

/** `trainer) v2`: a comm that holds `) `, as a process may name itself. */
const PAREN = Buffer.from('trainer) v2');
/** Bytes that are not UTF-8, with a `) ` among them too. */
const NOT_UTF8 = Buffer.from([0x72, 0x61, 0x6e, 0x6b, 0xff, 0xfe, 0x29, 0x20, 0x30, 0xc3]);

const HOST_OF: Record<string, string> = { ct129: 'kpro5', ct130: 'kpro6', ct131: 'kpro5' };
const VMID_OF: Record<string, number> = { ct129: 129, ct130: 130, ct131: 131 };
const INCIDENT = 'inc_20261130_092000_k3x9q2';

function identityOf(p: FleetProcess): ProcessIdentity {
  return {
    hostPid: p.hostPid,
    containerPid: p.containerPid ?? 0,
    startTimeTicks: p.startTime,
    cmdline: p.cmdline,
    pidNs: readlinkSync(`/proc/${p.hostPid}/ns/pid`),
  };
}

function route(id: string): Route {
  const r = routeFor(rig.inventory, id) ?? hostRouteFor(rig.inventory, id);
  if (!r) throw new Error(`no route to ${id}`);
  return r;
}

/** Signals these holders of `ct` with the one signal command, from `side`; returns the outcomes and the method line. */
async function signal(ct: string, side: SignalSide, ps: readonly FleetProcess[]) {
  const outputs: ExecResult[] = [];
  const on = side === 'host' ? route(HOST_OF[ct] ?? '') : route(ct);
  const targets = ps.map(identityOf);
  // The host's agent signals only what a bot-signed request and a worker-signed plan name.
  const { envelopes, approvalId } = signalEnvelopes({
    keys: rig.fleet.keys,
    incidentId: INCIDENT,
    container: ct,
    vmid: VMID_OF[ct] ?? 0,
    host: HOST_OF[ct] ?? '',
    side,
    targets,
  });
  const done = await sendSignals(
    {
      side,
      signal: 'TERM',
      pidNs: readlinkSync(`/proc/${ps[0]?.hostPid}/ns/pid`),
      targets,
      ids: { incidentId: INCIDENT, approvalId },
    },
    {
      exec: async (spec) => {
        const r = await rig.executor.exec(on, withEnvelopes(spec, envelopes));
        outputs.push(r);
        return r;
      },
      commandTimeoutMs: 10_000,
    },
  );
  const method = /^@method (.*)$/m.exec(outputs[0]?.stdout ?? '')?.[1] ?? null;
  return { done, method, stderr: outputs[0]?.stderr ?? '' };
}

const termsOf = (p: FleetProcess): number =>
  rig.fleet.signals().filter((s) => s.id === p.id && s.signal === 'SIGTERM').length;

async function waitGone(p: FleetProcess): Promise<void> {
  for (let i = 0; i < 200 && procStart(p.hostPid) === p.startTime; i++) await new Promise((r) => setTimeout(r, 25));
}

const CASES: Array<{ ct: string; side: SignalSide; method: string }> = [
  { ct: 'ct129', side: 'container', method: 'pidfd perl' },
  { ct: 'ct129', side: 'host', method: 'pidfd perl' },
  { ct: 'ct130', side: 'container', method: 'pidfd python' },
  { ct: 'ct130', side: 'host', method: 'pidfd python' },
  { ct: 'ct131', side: 'container', method: 'shell' },
];

describe('a holder named with `) ` or with bytes that are not UTF-8 is signalled', () => {
  for (const c of CASES)
    it(`${c.method} on the ${c.side} side (${c.ct}): each of three holders of one batch (named "trainer) v2", not UTF-8, plain) gets SIGTERM, answered in order`, async () => {
      const odd = await rig.fleet.spawnHolder(c.ct, { gpus: [{ index: 0, mib: 1_000 }], comm: PAREN });
      const bad = await rig.fleet.spawnHolder(c.ct, { gpus: [{ index: 1, mib: 1_000 }], comm: NOT_UTF8 });
      const plain = await rig.fleet.spawnHolder(c.ct, { gpus: [{ index: 2, mib: 1_000 }] });
      const r = await signal(c.ct, c.side, [odd, bad, plain]);
      expect(r.method).toBe(c.method);
      expect(r.stderr).not.toMatch(/Traceback|Error/);
      expect(r.done.map((d) => [d.identity.hostPid, d.result, d.reason])).toEqual([
        [odd.hostPid, 'sent', c.method === 'shell' ? expect.stringMatching(/not race-free/) : null],
        [bad.hostPid, 'sent', c.method === 'shell' ? expect.stringMatching(/not race-free/) : null],
        [plain.hostPid, 'sent', c.method === 'shell' ? expect.stringMatching(/not race-free/) : null],
      ]);
      for (const p of [odd, bad, plain]) await waitGone(p);
      expect([odd, bad, plain].map(termsOf)).toEqual([1, 1, 1]);
    });
});

describe('tier 1 through the worker', () => {
  it('holders named `trainer) v2` and with a name that is not UTF-8 are stopped from inside the container, not refused as "PID reused"', async () => {
    const h = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 3, mib: 20_000 }],
      title: 'python3 trainer.py --v2',
      comm: PAREN,
    });
    const b = await rig.fleet.spawnHolder('ct129', {
      gpus: [{ index: 4, mib: 20_000 }],
      title: 'python3 rank.py',
      comm: NOT_UTF8,
    });
    const incidentId = await rig.newIncident('ct129');
    await runUnstickJob({ kind: 'unstick', incidentId, machineId: 'ct129' }, rig.deps());
    const events = await rig.events(incidentId);
    for (const p of [h, b]) {
      const sig = ofType(events, 'signalled').filter((e) => e.hostPid === p.hostPid);
      expect(sig.map((e) => [e.signal, e.result])).toEqual([['TERM', 'sent']]);
      expect(termsOf(p)).toBe(1);
    }
    expect(ofType(events, 'verdict')[0]?.verdict.kind).toBe('recovered');
    expect(JSON.stringify(events)).not.toMatch(/PID reused/);
  });
});
