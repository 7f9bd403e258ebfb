/**
 * The doctor's agent and forced-key checks, which find a worker key that could still open a shell (pure, from
 * what the probes printed): the agent's version against the one this worker needs, a verb no agent has
 * refused, and `true` not run; `doctor all` lists the machines whose agent is older and those whose key still
 * opens a shell.
 */
import { describe, expect, it } from 'vitest';
import { AGENT_VERSION } from '../../src/agent-grammar/arg-types.ts';
import {
  judge,
  type AgentReading,
  type ContainerReading,
  type HostReading,
  type ProbeRun,
} from '../../src/doctor/judge.ts';
import { AGENT_PROBES } from '../../src/agent-grammar/templates/doctor-probes.ts';
import { VERBS } from '../../src/agent-grammar/verbs.ts';
import { agentLines, reportText } from '../../src/doctor/report-table.ts';

const run = (code: number, stdout = '', stderr = ''): ProbeRun => ({
  ran: true,
  code,
  signal: null,
  stdout,
  stderr,
  timedOut: false,
});
const REFUSED = run(126, '', 'gpu-medic-agent: refused: unknown verb doctor-no-such-verb\n');
const forced = (version = AGENT_VERSION): AgentReading => ({
  version: run(0, `gpu-medic-agent ${version} protocol 1\n`),
  unknownVerb: REFUSED,
  shell: run(126, '', 'gpu-medic-agent: refused: bad line\n'),
});
// A root shell: every line runs; `gpu-medic` is no program there.
const SHELL: AgentReading = {
  version: run(127, '', 'sh: 1: gpu-medic: not found\n'),
  unknownVerb: run(127, '', 'sh: 1: gpu-medic: not found\n'),
  shell: run(0),
};

function host(id: string, agent: AgentReading | null): HostReading {
  return {
    kind: 'host',
    machineId: id,
    login: { via: 'ssh', user: 'gpu-medic', where: `gpu-medic@${id}:22` },
    probes: { uname: run(0, '6.8.12-4-pve\n'), proc: run(0, 'uid 0\npid1 readable\n') },
    inits: [],
    agent,
  };
}

const find = (r: ReturnType<typeof judge>, id: string, check: 'agent' | 'forced key') => {
  const f = r.findings.find((x) => x.machineId === id && x.check === check);
  if (!f) throw new Error(`no ${check} for ${id}`);
  return f;
};

describe("the doctor's agent checks", () => {
  it('a host forced to a current agent: agent and forced key ok', () => {
    const r = judge([host('kpro5', forced())]);
    expect(find(r, 'kpro5', 'agent')).toMatchObject({ status: 'ok' });
    expect(find(r, 'kpro5', 'agent').detail).toContain(`gpu-medic-agent ${AGENT_VERSION}`);
    expect(find(r, 'kpro5', 'forced key')).toMatchObject({ status: 'ok' });
    expect(agentLines(r.findings)).toEqual([]);
  });

  it('an older agent fails the agent check, saying which version to install', () => {
    const r = judge([host('kpro5', forced('0.9.0'))]);
    const f = find(r, 'kpro5', 'agent');
    expect(f.status).toBe('fail');
    expect(f.detail).toContain(`0.9.0 is older than the ${AGENT_VERSION}`);
    expect(f.hint).toContain('agent/install.sh upgrade');
  });

  it('a key that runs `true` (exit 0, no output) is a shell: the forced-key check fails and says so', () => {
    const r = judge([host('kpro6', SHELL)]);
    const f = find(r, 'kpro6', 'forced key');
    expect(f.status).toBe('fail');
    expect(f.detail).toContain('`true` ran');
    expect(find(r, 'kpro6', 'agent').status).toBe('fail');
  });

  it('an unknown verb that is not refused with 126 and the refusal line fails, even when `true` did not run', () => {
    const r = judge([host('kpro5', { ...forced(), unknownVerb: run(1, '', 'whatever\n') })]);
    expect(find(r, 'kpro5', 'forced key').status).toBe('fail');
    expect(find(r, 'kpro5', 'forced key').detail).toContain('was not refused');
  });

  it('doctor all lists the hosts whose agent is older or missing, and those that still allow a shell', () => {
    const r = judge([host('kpro5', forced()), host('kpro6', SHELL), host('kpro7', forced('0.9.0'))]);
    expect(agentLines(r.findings)).toEqual([
      'Agent older than this worker needs, or missing: kpro6 (none answered), kpro7 (0.9.0)',
      "Still allows a shell with the worker's key: kpro6",
    ]);
    expect(reportText(r, 3)).toContain("Still allows a shell with the worker's key: kpro6");
  });

  it('adds no agent checks where the worker uses root-shell access (no agent reading)', () => {
    const r = judge([host('kpro5', null)]);
    expect(r.findings.some((f) => f.check === 'agent' || f.check === 'forced key')).toBe(false);
  });

  it('behind the agent a non-root container login is no defect; without it, it still warns', () => {
    const ct = (agent: AgentReading | null): ContainerReading => ({
      kind: 'container',
      machineId: 'ct131',
      hostId: 'kpro5',
      vmid: 131,
      login: { via: 'ssh', user: 'gpu-medic', where: 'gpu-medic@10.0.0.131:22' },
      probes: { uname: run(0, '6.8.12-4-pve\n'), proc: run(0, 'uid 1000\npid1 readable\n') },
      agent,
    });
    const proc = (agent: AgentReading | null) =>
      judge([ct(agent)]).findings.find((f) => f.check === '/proc' && f.machineId === 'ct131');
    expect(proc(forced())?.status).toBe('ok');
    expect(proc(null)?.status).toBe('warn');
  });

  it('probes with fixed lines: the version line, a verb the grammar lacks, and a bare `true`', () => {
    expect(AGENT_PROBES.version).toBe('gpu-medic 1 version');
    expect(AGENT_PROBES.unknownVerb).toMatch(/^gpu-medic 1 \d+ host [a-z-]+$/);
    expect(AGENT_PROBES.shell).toBe('true');
    expect(Object.keys(VERBS)).not.toContain(AGENT_PROBES.unknownVerb.split(' ')[4]);
  });
});
