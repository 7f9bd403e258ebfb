/**
 * What one read-only session can cost a host (agent/PROTOCOL.md, "Limits"), on the real agent
 * installed by install.sh behind a real sshd and sudo (agent-host.ts): a batch is capped at what the
 * worker sends, runs are capped per host with a slot kept for destructive verbs, a part's output is
 * capped as it is read and never written to the host's disk, everything a run started dies when
 * the client goes away, and a child that cannot be reaped does not pin the session.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_LIMITS } from '../../src/agent-grammar/arg-types.ts';
import { parseMachineRead } from '../../src/agent-grammar/templates/machine-read.ts';
import { type AgentHost, GPU_UUID, inHostNs, isAlive, PASSED_GPU, startAgentHost } from './agent-host.ts';
import { APPROVAL, decision, INCIDENT, plan, request, stdinOf } from './envelopes.ts';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

let host: AgentHost;
const mode = (m: string) => writeFile(join(host.dir, 'mode'), m);
const conf = () => host.inHost('/etc/gpu-medic/agent.conf');

beforeAll(async () => {
  host = await startAgentHost();
}, 60_000);

afterAll(async () => {
  await host?.stop();
});

/** `batch` with `n` parts of `gpus`. */
const batchOf = (n: number) => [
  'gpu-medic',
  '1',
  '5000',
  'host',
  'batch',
  ...Array.from({ length: n }, (_, i) => [...(i > 0 ? ['+'] : []), '2000', 'gpus']).flat(),
];

describe('a batch is capped at what the worker sends', () => {
  it(`${AGENT_LIMITS.batchParts + 1} parts: refused, nothing ran; ${AGENT_LIMITS.batchParts} parts: every part answers`, async () => {
    const before = (await host.ran()).length;
    const over = await host.ssh(batchOf(AGENT_LIMITS.batchParts + 1));
    expect(over.code).toBe(126);
    expect(over.stderr).toBe(`gpu-medic-agent: refused: a batch of more than ${AGENT_LIMITS.batchParts} parts\n`);
    expect(await host.ran()).toHaveLength(before);
    const at = await host.ssh(batchOf(AGENT_LIMITS.batchParts));
    expect(at.code).toBe(0);
    expect(at.stdout.split('\n').filter((l) => l.startsWith('gpu-medic-part '))).toHaveLength(AGENT_LIMITS.batchParts);
    expect(await host.ran()).toHaveLength(before + AGENT_LIMITS.batchParts);
  });

  it(`a read asking more than ${AGENT_LIMITS.readTimeoutMs} ms: refused; at the ceiling it runs`, async () => {
    const over = await host.ssh(['gpu-medic', '1', String(AGENT_LIMITS.readTimeoutMs + 1), 'host', 'gpus']);
    expect(over.stderr).toBe(`gpu-medic-agent: refused: a read's timeout is over ${AGENT_LIMITS.readTimeoutMs} ms\n`);
    const at = await host.ssh(['gpu-medic', '1', String(AGENT_LIMITS.readTimeoutMs), 'host', 'gpus']);
    expect(at).toMatchObject({ code: 0, stderr: '' });
  });
});

describe('runs are capped per host, with a slot kept for destructive verbs', () => {
  it('max_runs=3: two slow reads hold the read slots, a third read is told busy (75) and ran nothing; a reset still runs', async () => {
    const original = await readFile(conf(), 'utf8');
    await writeFile(conf(), original.replace(/^max_runs=.*$/m, 'max_runs=3'));
    await mode('slow');
    try {
      const slow = [
        host.ssh(['gpu-medic', '1', '4000', 'host', 'gpus']),
        host.ssh(['gpu-medic', '1', '4000', 'host', 'gpus']),
      ];
      // Both slow reads are running (the recorder logged them) before the third is sent.
      const before = (await host.ran()).length;
      for (let i = 0; i < 200 && (await host.ran()).length < before + 2; i++) await sleep(25);
      const ranBefore = (await host.ran()).length;
      const busy = await host.ssh(['gpu-medic', '1', '4000', 'host', 'gpus']);
      expect(busy.code).toBe(75);
      expect(busy.stderr).toMatch(/^gpu-medic-agent: busy: 3 runs at once on this host already/);
      expect(await host.ran()).toHaveLength(ranBefore);
      // The kept slot: a genuine reset is not busy (it runs, and in this mode the tool hangs until its timeout).
      const p = plan(host.worker.privateKey, { approvalId: APPROVAL, kind: 'host_reset', gpuUuids: [PASSED_GPU] });
      const reset = await host.ssh(['gpu-medic', '1', '1000', 'host', 'reset', PASSED_GPU, INCIDENT, APPROVAL], {
        input: stdinOf({ plan: p, request: request(host.bot.privateKey), decision: decision(host.bot.privateKey, p) }),
      });
      expect(reset.code).toBe(124);
      expect((await host.ran()).slice(ranBefore)).toEqual([`--gpu-reset -i ${PASSED_GPU}`]);
      expect((await Promise.all(slow)).map((r) => r.code)).toEqual([124, 124]);
      // The slots are free again once the runs ended.
      await mode('');
      expect((await host.ssh(['gpu-medic', '1', '4000', 'host', 'gpus'])).code).toBe(0);
    } finally {
      await mode('');
      await writeFile(conf(), original);
    }
  });
});

describe("a part's output is capped as it is read, never written to the host's disk", () => {
  it('a 64 MiB part through a host whose /tmp is 16 MiB: the frame says 64 MiB and carries 256 KiB; /tmp stays empty', async () => {
    // A small /tmp in the host's namespace only; the host's own dir (under the machine's /tmp) bound back into it.
    const w = host.dir;
    const small = [
      'mkdir -p /dev/gmt-w',
      `mount --bind '${w}' /dev/gmt-w`,
      'mount -t tmpfs -o size=16m gpu-medic-test-tmp /tmp',
      `mkdir -p '${w}'`,
      `mount --bind /dev/gmt-w '${w}'`,
    ].join(' && ');
    const tmp = await inHostNs(host, ['sh', '-c', small]);
    expect(tmp).toMatchObject({ code: 0 });
    await mode('flood');
    try {
      const r = await host.ssh(['gpu-medic', '1', '20000', 'host', 'batch', '15000', 'gpus', '+', '15000', 'gpus']);
      expect(r.code).toBe(0);
      const spec = { argv: ['nvidia-smi'], timeoutMs: 15000 };
      const parsed = parseMachineRead([spec, spec], r.stdout);
      if (!parsed.ok) throw new Error(parsed.reason);
      expect(parsed.parts.map((p) => [p.code, p.stdout.length, p.truncated])).toEqual([
        [0, 256 * 1024, true],
        [0, 256 * 1024, true],
      ]);
      expect(/^gpu-medic-part 0 0 (\d+) /m.exec(r.stdout)?.[1]).toBe(String(64 * 1024 * 1024));
      const used = await inHostNs(host, ['sh', '-c', `du -sk -x /tmp | cut -f1`]);
      expect(Number(used.out.trim())).toBeLessThan(64);
    } finally {
      await mode('');
      await inHostNs(host, ['sh', '-c', `umount '${w}'; umount /tmp; umount /dev/gmt-w; rmdir /dev/gmt-w`]);
    }
  });
});

describe('the client going away', () => {
  it('a slow read whose SSH client is killed: the tool and its child are gone within 5 s', async () => {
    await mode('slow');
    const childFile = join(host.dir, 'child.pid');
    await writeFile(childFile, '');
    try {
      const c = spawn('ssh', host.sshArgv(['gpu-medic 1 60000 host gpus']), {
        stdio: ['pipe', 'ignore', 'ignore'],
      });
      let child = 0;
      for (let i = 0; i < 400 && child === 0; i++) {
        child = Number((await readFile(childFile, 'utf8')).trim()) || 0;
        await sleep(25);
      }
      expect(child).toBeGreaterThan(0);
      expect(isAlive(child)).toBe(true);
      c.kill('SIGKILL');
      const t0 = Date.now();
      while (isAlive(child) && Date.now() - t0 < 5000) await sleep(50);
      expect(isAlive(child)).toBe(false);
    } finally {
      await mode('');
    }
  });
});

describe('a child that cannot be reaped', () => {
  // cgroup v1's freezer (this machine): a frozen task ignores SIGKILL until thawed, as one in D state
  // on a wedged driver does. Real Proxmox hosts run cgroup v2, whose cgroup.freeze behaves the same.
  const freezer = '/sys/fs/cgroup/freezer';
  it.skipIf(!existsSync(join(freezer, 'cgroup.procs')))(
    'a frozen tool past its timeout: the session ends (137) within a few seconds, the tool is left to init; thawed, it dies',
    async () => {
      const cg = join(freezer, `gpu-medic-test-${process.pid}-${Date.now()}`);
      mkdirSync(cg);
      await mode('hold');
      const toolFile = join(host.dir, 'tool.pid');
      await writeFile(toolFile, '');
      let tool = 0;
      try {
        const run = host.ssh(['gpu-medic', '1', '1000', 'host', 'gpus'], { timeoutMs: 30_000 });
        for (let i = 0; i < 400 && tool === 0; i++) {
          tool = Number((await readFile(toolFile, 'utf8')).trim()) || 0;
          await sleep(10);
        }
        expect(tool).toBeGreaterThan(0);
        writeFileSync(join(cg, 'cgroup.procs'), String(tool));
        writeFileSync(join(cg, 'freezer.state'), 'FROZEN');
        // Its timeout (1 s), TERM, KILL a second later, then a few seconds of waiting, and the agent
        // answers 137; pinned by the frozen tool it would not answer before the client's 30 s kill (null).
        const r = await run;
        expect(r.code).toBe(137);
        expect(isAlive(tool)).toBe(true);
      } finally {
        writeFileSync(join(cg, 'freezer.state'), 'THAWED');
        for (let i = 0; i < 100 && tool > 0 && isAlive(tool); i++) await sleep(20);
        await mode('');
        try {
          rmdirSync(cg);
        } catch {
          execFileSync('sh', ['-c', `sleep 1; rmdir ${cg}`]);
        }
      }
      expect(isAlive(tool)).toBe(false);
    },
  );
});

describe('reads are fine through all of this', () => {
  it('a plain read answers with the GPU table', async () => {
    const r = await host.ssh(['gpu-medic', '1', '5000', 'host', 'gpu', GPU_UUID]);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toContain(GPU_UUID);
  });
});
