import { describe, expect, it } from 'vitest';
import { AGENT_VERSION } from '../../src/agent-grammar/arg-types.ts';
import { ErrorCode } from '../../src/errors.ts';
import { queryComputeApps, queryGpus } from '../../src/agent-grammar/templates/snapshot-commands.ts';
import { machineRead, parseMachineRead } from '../../src/agent-grammar/templates/machine-read.ts';
import { gpuReset, readProcs } from '../../src/agent-grammar/templates/unstick-commands.ts';
import { agentRefusal, buildAgentCommand } from '../../src/ssh/agent-line.ts';
import type { Route, SshEndpoint } from '../../src/ssh/types.ts';

const endpoint: SshEndpoint = {
  machineId: 'kpro5',
  host: '192.0.2.5',
  port: 22,
  username: 'gpu-medic',
  privateKeyPath: '/nonexistent',
  hostKeyFingerprints: [],
};
const direct: Route = { kind: 'direct', endpoint };
const pct: Route = { kind: 'pct', host: endpoint, vmid: 129 };
const t = { timeoutMs: 15_000 };
const U = 'GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0';

describe('the agent line', () => {
  it('is `gpu-medic 1 <timeout_ms> host <verb> args…` on the machine the key logs into', () => {
    expect(buildAgentCommand(direct, readProcs([4242, 77], t)).command).toBe('gpu-medic 1 15000 host procs 4242 77');
    expect(buildAgentCommand(direct, queryGpus(t)).command).toBe('gpu-medic 1 15000 host gpus');
  });

  it('is `… ct <vmid> <verb> …` for a container reached through pct exec on its host', () => {
    expect(buildAgentCommand(pct, readProcs([57], t)).command).toBe('gpu-medic 1 15000 ct 129 procs 57');
  });

  it('carries a destructive verb with its incident and approval, never its argv', () => {
    const spec = gpuReset(U, { ...t, incidentId: 'inc_20261130_092000_k3x9q2', approvalId: 'none' });
    const line = buildAgentCommand(direct, spec).command;
    expect(line).toBe(`gpu-medic 1 15000 host reset ${U} inc_20261130_092000_k3x9q2 none`);
    expect(line).not.toContain('nvidia-smi');
  });

  it("gives the client's deadline room for the agent's KILL (and pct exec's extra time)", () => {
    expect(buildAgentCommand(direct, queryGpus(t)).lastRemoteKillMs).toBe(16_000);
    expect(buildAgentCommand(pct, queryGpus(t)).lastRemoteKillMs).toBe(18_000);
  });

  it('joins a snapshot batch as `batch <t> <verb> + <t> <verb>`, and its output parses as the shell batch did', () => {
    const parts = [queryGpus(t), queryComputeApps({ timeoutMs: 9000 })];
    const spec = machineRead(parts);
    expect(buildAgentCommand(direct, spec).command).toBe(
      `gpu-medic 1 ${spec.timeoutMs} host batch 15000 gpus + 9000 apps`,
    );
    const b64 = (s: string) => Buffer.from(s).toString('base64');
    const out = `gpu-medic-part 0 0 2 0 ${b64('a\n')} \ngpu-medic-part 1 124 0 1 ${b64('')} ${b64('x')}\n`;
    const parsed = parseMachineRead(parts, out);
    expect(parsed.ok && parsed.parts.map((p) => [p.code, p.stdout, p.timedOut])).toEqual([
      [0, 'a\n', false],
      [124, '', true],
    ]);
  });

  it('is refused before anything is sent: no verb, a word the agent would refuse, a bad container id', () => {
    expect(() => buildAgentCommand(direct, { argv: ['true'], timeoutMs: 1000 })).toThrow(/no agent verb/);
    expect(() =>
      buildAgentCommand(direct, { argv: ['x'], timeoutMs: 1000, agent: { verb: 'procs', args: ['1;id'] } }),
    ).toThrow(/would refuse/);
    expect(() =>
      buildAgentCommand(direct, { argv: ['x'], timeoutMs: 1000, agent: { verb: 'procs', args: ['a'.repeat(129)] } }),
    ).toThrow(/would refuse/);
    expect(() => buildAgentCommand({ kind: 'pct', host: endpoint, vmid: 0 }, queryGpus(t))).toThrow(/Container id/);
    expect(() => buildAgentCommand(direct, { ...queryGpus(t), timeoutMs: 0 })).toThrow(/positive/);
  });
});

describe("an agent's refusal", () => {
  const base = { command: 'gpu-medic 1 15000 host procs 1', machineId: 'kpro5' };

  it('is an agent_refused error with its reason when the agent exits 126 with `refused:`', () => {
    const e = agentRefusal({ ...base, code: 126, stderr: 'gpu-medic-agent: refused: bad pid "x"\n' });
    expect(e?.code).toBe(ErrorCode.AgentRefused);
    expect(e?.message).toContain('kpro5 refused');
    expect(e?.message).toContain('bad pid "x"');
    expect(e?.message).toContain('Nothing was run');
  });

  it('names the agent version to install when an older agent does not know the verb', () => {
    const e = agentRefusal({ ...base, code: 126, stderr: 'gpu-medic-agent: refused: unknown verb gpu-report\n' });
    expect(e?.code).toBe(ErrorCode.AgentRefused);
    expect(e?.message).toContain(`Install gpu-medic-agent ${AGENT_VERSION}`);
    expect(e?.detail.needVersion).toBe(AGENT_VERSION);
    const named = agentRefusal(
      { ...base, code: 126, stderr: 'gpu-medic-agent: refused: unknown verb gpu-report\n' },
      'gpu-medic-agent 0.9.0 protocol 1\n',
    );
    expect(named?.message).toContain('kpro5 (0.9.0) does not know this verb');
    expect(named?.detail.installedVersion).toBe('0.9.0');
  });

  it("is not an exit 126 without the agent's line, nor the line with another exit", () => {
    expect(agentRefusal({ ...base, code: 126, stderr: 'sh: permission denied\n' })).toBeNull();
    expect(agentRefusal({ ...base, code: 1, stderr: 'gpu-medic-agent: refused: x\n' })).toBeNull();
    expect(agentRefusal({ ...base, code: 0, stderr: '' })).toBeNull();
  });
});
