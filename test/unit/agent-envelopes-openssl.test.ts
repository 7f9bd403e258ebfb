/**
 * No gpu-medic code on the host: the envelopes a destructive verb carries on stdin verify as the host's agent verifies
 * them, with OpenSSL 3 alone (`openssl pkeyutl -verify -rawin`, agent/PROTOCOL.md): the bot's request
 * with the bot's public key, the worker-signed plan with the worker's, and a changed body fails.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { withEnvelopes } from '../../src/agent-grammar/envelopes.ts';
import { newKeyPair } from '../../src/auth/keys.ts';
import { botSigner } from '../../src/auth/signed-jobs.ts';
import { sealStep } from '../../src/plan/plan-seal.ts';
import { signalCommand } from '../../src/agent-grammar/templates/signal.ts';
import { stepCommands, type Step } from '../../src/plan/unstick-plan.ts';

const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-envelopes-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** What the agent does with one stdin line: the body and signature to files, then openssl. */
function opensslVerifies(line: string, pubPem: string, tamper = false): boolean {
  const [, body64 = '', sig64 = ''] = line.split(' ');
  const body = Buffer.from(body64, 'base64');
  if (tamper) body[body.length - 1] = (body[body.length - 1] ?? 0) ^ 1;
  const f = (name: string, data: string | Buffer) => {
    const p = join(dir, `${name}-${randomBytes(4).toString('hex')}`);
    writeFileSync(p, data);
    return p;
  };
  try {
    execFileSync(
      'openssl',
      [
        'pkeyutl',
        '-verify',
        '-pubin',
        '-inkey',
        f('key.pem', pubPem),
        '-rawin',
        '-in',
        f('body', body),
        '-sigfile',
        f('sig', Buffer.from(sig64, 'base64')),
      ],
      { stdio: 'pipe' },
    );
    return true;
  } catch {
    return false;
  }
}

describe('a destructive command’s envelopes, as the agent verifies them', () => {
  it('the request verifies with the bot’s key and the plan with the worker’s; a changed byte does not', () => {
    const bot = newKeyPair();
    const worker = newKeyPair();
    const incidentId = 'inc_20261130_092000_k3x9q2';
    const target = {
      hostPid: 41234,
      containerPid: 812,
      startTimeTicks: 99_000,
      cmdline: 'sglang::scheduler_TP0',
      pidNs: 'pid:[4026532845]',
      gpus: [],
      hostOnlyWhy: null,
    };
    const step: Step = {
      id: 'container_signal-000000000000',
      tier: 1,
      kind: 'container_signal',
      machineId: 'ct129',
      targets: [target],
      gpus: [],
      commands: stepCommands('container_signal', [target], [], { timeoutMs: 15_000 }),
      explanation: 'x',
      graceMs: 1,
      releaseTimeoutMs: 1,
      pollIntervalMs: 1,
    };
    const request = botSigner(bot.privateKey).request(
      { incidentId, target: 'ct129', host: 'kpro5', vmid: 129, requester: 'U0REQUEST1', channel: 'C0CHANNEL1' },
      Date.now(),
    );
    const seal = sealStep(
      {
        incidentId,
        approvalId: '',
        requester: 'U0REQUEST1',
        createdAt: Date.now(),
        expiresAt: Date.now() + 60_000,
        approvers: [],
        adminOnly: false,
        escalation: null,
        container: 'ct129',
        vmid: 129,
        host: 'kpro5',
        step,
      },
      randomBytes(32),
      worker.privateKey,
    );
    const spec = withEnvelopes(
      signalCommand('container', 'TERM', null, [{ pid: 812, startTimeTicks: 99_000, containerPid: null }], {
        timeoutMs: 15_000,
        incidentId,
        approvalId: 'none',
      }),
      { request, decisions: [], plan: { body: seal.body, sig: seal.sig } },
    );
    const [reqLine = '', planLine = ''] = (spec.stdin ?? '').split('\n');
    const pem = (k: typeof bot) => k.publicKey.export({ type: 'spki', format: 'pem' }).toString();
    expect(reqLine.startsWith('request ')).toBe(true);
    expect(planLine.startsWith('plan ')).toBe(true);
    expect(opensslVerifies(reqLine, pem(bot))).toBe(true);
    expect(opensslVerifies(planLine, pem(worker))).toBe(true);
    expect(opensslVerifies(planLine, pem(bot))).toBe(false);
    expect(opensslVerifies(reqLine, pem(bot), true)).toBe(false);
    // What the agent checks in the plan: its header, then JSON naming the incident.
    const plan = Buffer.from(planLine.split(' ')[1] ?? '', 'base64').toString('utf8');
    expect(plan.startsWith('gpu-medic plan v1\n')).toBe(true);
    expect(JSON.parse(plan.slice('gpu-medic plan v1\n'.length))).toMatchObject({ incidentId, approvalId: '' });
  });
});
