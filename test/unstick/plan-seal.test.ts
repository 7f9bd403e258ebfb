import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { validateInventory } from '../../src/config/load-inventory.ts';
import { openSeal, sealStep } from '../../src/plan/plan-seal.ts';
import { stepCommands, type Step } from '../../src/plan/unstick-plan.ts';
import { planKeyFor } from '../../workers/plan-key.ts';
import { newKeyPair } from '../../src/auth/keys.ts';

const target = {
  hostPid: 41234,
  containerPid: 812,
  startTimeTicks: 99_000,
  cmdline: 'sglang::scheduler_TP0',
  pidNs: 'pid:[4026532845]',
  gpus: [{ index: 0, hostIndex: 2, uuid: 'GPU-1', usedMiB: 96_413 }],
  hostOnlyWhy: 'root-owned',
};
const step: Step = {
  id: 'host_kill-3f9a0c1b2d4e',
  tier: 2,
  kind: 'host_kill',
  machineId: 'kpro5',
  targets: [target],
  gpus: [],
  commands: stepCommands('host_kill', [target], [], { timeoutMs: 15_000 }),
  explanation: 'x',
  graceMs: 1000,
  releaseTimeoutMs: 5000,
  pollIntervalMs: 300,
};
const base = {
  incidentId: 'inc_1',
  approvalId: 'apr_AAAAAAAAAAAAAAAAAAAAAA',
  requester: 'U0REQUEST1',
  createdAt: 1_000,
  expiresAt: 901_000,
  approvers: ['U0APPROVE1'],
  adminOnly: false,
  escalation: null,
  container: 'ct129',
  vmid: 129,
  host: 'kpro5',
  step,
};

describe('plan seal', () => {
  // So no Redis writer can change a plan: the seal is the worker's Ed25519 signature (the bot verifies it
  // with the public key alone) and the workers' HMAC as before; each key and each part is checked.
  it('opens what it sealed (without commands); refuses an altered body, another key, a bad mac, or none', () => {
    const key = randomBytes(32);
    const worker = newKeyPair();
    const pub = [worker.publicKey];
    const seal = sealStep(base, key, worker.privateKey);
    const opened = openSeal(seal, pub, key);
    expect(opened.ok && opened.sealed.step.targets[0]?.hostPid).toBe(41234);
    expect(opened.ok && opened.sealed.expiresAt).toBe(901_000);
    expect(opened.ok && 'commands' in opened.sealed.step).toBe(false);
    // The bot's check: the public key only.
    expect(openSeal(seal, pub).ok).toBe(true);
    const altered = { ...seal, body: seal.body.replace('41234', '1') };
    expect(openSeal(altered, pub, key)).toMatchObject({
      ok: false,
      why: expect.stringMatching(/valid worker signature/),
    });
    expect(openSeal(seal, pub, randomBytes(32)).ok).toBe(false);
    expect(openSeal(seal, [newKeyPair().publicKey], key).ok).toBe(false);
    expect(openSeal({ ...seal, mac: 'zz' }, pub, key)).toMatchObject({
      ok: false,
      why: expect.stringMatching(/valid worker seal/),
    });
    expect(openSeal(null, pub, key)).toMatchObject({ ok: false, why: expect.stringMatching(/no sealed plan/) });
  });
});

describe('plan seal key', () => {
  const log = pino({ level: 'silent' });
  const dir = mkdtempSync(join(tmpdir(), 'plan-key-'));
  const inv = (keyFile: string) => {
    const v = validateInventory({
      defaults: { keyFile },
      hosts: [{ id: 'kpro5', address: '10.0.0.6', hostKeys: [`SHA256:${'B'.repeat(43)}`] }],
    }).inventory;
    if (!v) throw new Error('inventory');
    return v;
  };

  it('the same secret gives the same key, another secret another; without one, the SSH key file decides; a FIFO is never opened', () => {
    const k1 = join(dir, 'id1');
    const k2 = join(dir, 'id2');
    writeFileSync(k1, 'key one');
    writeFileSync(k2, 'key two');
    const s = 'x'.repeat(40);
    expect(planKeyFor(s, inv(k1), log).equals(planKeyFor(s, inv(k2), log))).toBe(true);
    expect(planKeyFor(s, inv(k1), log).equals(planKeyFor(`${s}y`, inv(k1), log))).toBe(false);
    expect(planKeyFor(undefined, inv(k1), log).equals(planKeyFor(undefined, inv(k1), log))).toBe(true);
    expect(planKeyFor(undefined, inv(k1), log).equals(planKeyFor(undefined, inv(k2), log))).toBe(false);
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    // Returns (a per-process key) instead of blocking on the FIFO.
    const a = planKeyFor(undefined, inv(fifo), log);
    expect(a.equals(planKeyFor(undefined, inv(fifo), log))).toBe(false);
    rmSync(dir, { recursive: true, force: true });
  });
});
