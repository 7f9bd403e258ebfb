/**
 * The host's agent checks every target against the container the bot-signed request names, on the
 * test fleet's real containers (their processes in `lxc/<vmid>` cgroups, their GPUs passed by the
 * fleet's `pct config`): even a compromised worker, which can sign any plan, cannot turn a genuine
 * request for one container against another. Each refusal has its twin, which differs only in the
 * container the request names and is accepted and acts (the fleet's signal and tool logs show it).
 */
import { readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StepEnvelopes, withEnvelopes } from '../../src/agent-grammar/envelopes.ts';
import { gpuReset } from '../../src/agent-grammar/templates/unstick-commands.ts';
import { botSigner } from '../../src/auth/signed-jobs.ts';
import { hostRouteFor } from '../../src/config/machines.ts';
import { CodedError } from '../../src/errors.ts';
import { planDigest, sealStep } from '../../src/plan/plan-seal.ts';
import { sendSignals } from '../../src/unstick-runner/send-signals.ts';
import { type HostState, readJson } from '../harness/fleet/state.ts';
import type { FleetProcess } from '../harness/fleet/types.ts';
import { startRig, type Rig } from './rig.ts';
import { signalEnvelopes } from './signed-signal.ts';

let rig: Rig;
const INCIDENT = 'inc_20261206_040000_hostck';

beforeAll(async () => {
  rig = await startRig({
    hosts: [{ id: 'kpro5', gpus: 4 }],
    containers: [
      // Disjoint GPUs: a GPU of one is never the other's.
      { id: 'ct129', vmid: 129, host: 'kpro5', gpus: [0, 1] },
      { id: 'ct130', vmid: 130, host: 'kpro5', gpus: [2, 3] },
    ],
  });
}, 120_000);

afterAll(async () => {
  await rig?.stop();
});

const identityOf = (p: FleetProcess) => ({
  hostPid: p.hostPid,
  containerPid: p.containerPid ?? 0,
  startTimeTicks: p.startTime,
  cmdline: p.cmdline,
  pidNs: readlinkSync(`/proc/${p.hostPid}/ns/pid`),
});

const host = () => {
  const r = hostRouteFor(rig.inventory, 'kpro5');
  if (!r) throw new Error('no route to kpro5');
  return r;
};

/** A host kill of `p` (approved card, tier 2) as the worker sends it, the request naming `ct`. */
async function hostKill(p: FleetProcess, ct: 'ct129' | 'ct130') {
  const { envelopes, approvalId } = signalEnvelopes({
    keys: rig.fleet.keys,
    incidentId: INCIDENT,
    container: ct,
    vmid: ct === 'ct129' ? 129 : 130,
    host: 'kpro5',
    side: 'host',
    targets: [identityOf(p)],
  });
  const outputs: string[] = [];
  const done = await sendSignals(
    {
      side: 'host',
      signal: 'TERM',
      pidNs: readlinkSync(`/proc/${p.hostPid}/ns/pid`),
      targets: [identityOf(p)],
      ids: { incidentId: INCIDENT, approvalId },
    },
    {
      exec: async (spec) => {
        const r = await rig.executor.exec(host(), withEnvelopes(spec, envelopes));
        outputs.push(r.stdout);
        return r;
      },
      commandTimeoutMs: 10_000,
    },
  ).catch((e: unknown) => e);
  return { done, outputs };
}

const termsOf = (p: FleetProcess) => rig.fleet.signals().filter((s) => s.id === p.id && s.signal === 'SIGTERM').length;

/** A reset of host GPU `index` (approved card), the request naming `ct`. */
async function reset(index: number, ct: 'ct129' | 'ct130') {
  const state = readJson<HostState>(join(rig.fleet.machine('kpro5').dir, 'state.json'));
  const uuid = state.gpus.find((g) => g.index === index)?.uuid ?? '';
  const now = Date.now();
  const approvalId = 'apr_HostEnforcesFleetRst01';
  const vmid = ct === 'ct129' ? 129 : 130;
  const bot = botSigner(rig.fleet.keys.bot.privateKey);
  const request = bot.request(
    { incidentId: INCIDENT, target: ct, host: 'kpro5', vmid, requester: 'U0REQUEST1', channel: 'C0GPUOPS01' },
    now,
  );
  const seal = sealStep(
    {
      incidentId: INCIDENT,
      approvalId,
      requester: 'U0REQUEST1',
      createdAt: now,
      expiresAt: now + 300_000,
      approvers: ['U0APPROVE1'],
      adminOnly: false,
      escalation: null,
      container: ct,
      vmid,
      host: 'kpro5',
      step: {
        id: `host_reset-${index}`,
        tier: 2,
        kind: 'host_reset',
        machineId: 'kpro5',
        targets: [],
        gpus: [{ index, hostIndex: index, uuid, usedMiB: 1000 }],
        commands: [],
        explanation: 'test: reset this GPU',
        graceMs: 0,
        releaseTimeoutMs: 0,
        pollIntervalMs: 100,
      },
    },
    Buffer.alloc(32, 1),
    rig.fleet.keys.worker.privateKey,
  );
  const decision = bot.decision(
    {
      approvalId,
      incidentId: INCIDENT,
      planDigest: planDigest(seal),
      decision: 'approved',
      decider: 'U0APPROVE1',
      channel: 'C0GPUOPS01',
    },
    now,
  );
  const envelopes: StepEnvelopes = { request, decisions: [decision], plan: { body: seal.body, sig: seal.sig } };
  const since = Date.now();
  const r = await rig.executor
    .exec(host(), withEnvelopes(gpuReset(uuid, { timeoutMs: 10_000, incidentId: INCIDENT, approvalId }), envelopes))
    .catch((e: unknown) => e);
  const ran = rig.fleet
    .commandLog('kpro5')
    .filter((c) => c.via === 'tool' && c.ts >= since && c.cmd.includes('--gpu-reset'))
    .map((c) => c.cmd);
  return { r, ran, uuid };
}

describe("kpro5's agent checks targets against the request's container, on the fleet", () => {
  it("a genuine request for ct130 with a plan naming a process of ct129: refused, ct129's process lives; the request for ct129 signals it", async () => {
    const p = await rig.fleet.spawnHolder('ct129', { gpus: [{ index: 0, mib: 1000 }], title: 'python3 serve.py' });
    const refused = await hostKill(p, 'ct130');
    expect(refused.done).toBeInstanceOf(CodedError);
    expect((refused.done as CodedError).message).toContain(
      `target ${p.hostPid}:${p.startTime} is not in container 130's cgroup on this host`,
    );
    expect(termsOf(p)).toBe(0);
    const twin = await hostKill(p, 'ct129');
    expect(twin.done).not.toBeInstanceOf(Error);
    for (let i = 0; i < 100 && termsOf(p) === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(termsOf(p)).toBe(1);
  });

  it("a reset of ct129's GPU asked for with a request for ct130: refused, nothing reset; the request for ct129 resets it", async () => {
    const refused = await reset(0, 'ct130');
    expect(refused.r).toBeInstanceOf(CodedError);
    expect((refused.r as CodedError).message).toContain(
      `GPU ${refused.uuid} is not passed to container 130 by its pct config on this host`,
    );
    expect(refused.ran).toEqual([]);
    const twin = await reset(0, 'ct129');
    expect(twin.r).not.toBeInstanceOf(Error);
    expect(twin.ran).toEqual([expect.stringMatching(new RegExp(`--gpu-reset -i ${twin.uuid}$`))]);
  });
});
