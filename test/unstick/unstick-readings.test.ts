/**
 * Why the container's PID namespace could not be read, in plain words (the real cause, not a guess): each
 * failing read of `lxc-info` and of the init's /proc names itself. Readings are real outputs of
 * the read-procs template (src/agent-grammar/templates/unstick-commands.ts) as a host prints them.
 */
import { describe, expect, it } from 'vitest';
import { parseProcReadings } from '../../src/agent-grammar/templates/unstick-commands.ts';
import { initReadingProblem, lxcInfoProblem } from '../../src/readings/unstick-readings.ts';
import type { ExecResult } from '../../src/ssh/types.ts';

const hex = (s: string): string => Buffer.from(s, 'latin1').toString('hex');
const stat = (pid: number, start: number): string =>
  `${pid} (init) S 0 ${pid} ${pid} 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 ${start} 1 1 0 0 0\n`;
function reading(o: {
  pid: number;
  nspid?: string | null;
  ns?: string;
  stat?: boolean;
  done?: boolean;
  cgroup?: string | null;
}): string {
  const lines = [`@pid ${o.pid}`, `@stat ${o.stat === false ? '' : hex(stat(o.pid, 4242))}`];
  if (o.nspid !== null) lines.push(`@status NSpid:\t${o.nspid ?? `${o.pid}\t1`}`);
  lines.push(
    `@status Uid:\t0\t0\t0\t0`,
    `@ns ${o.ns ?? 'pid:[4026532845]'}`,
    `@cgroup ${o.cgroup === null ? '' : hex(o.cgroup ?? '0::/lxc/129/ns/init.scope\n')}`,
    `@cmdline ${o.pid} ${hex('/sbin/init\0')}`,
  );
  if (o.done !== false) lines.push('@done');
  return `${lines.join('\n')}\n`;
}
function result(over: Partial<ExecResult>): ExecResult {
  return {
    command: 'exec timeout -k 1 15 lxc-info -n 129 -p',
    machineId: 'kpro5',
    code: 0,
    signal: null,
    stdout: '',
    stderr: '',
    durationMs: 5,
    timedOut: false,
    truncated: false,
    ...over,
  };
}

describe('lxcInfoProblem', () => {
  it('exit 127 → the tool is missing on that host; not "not running"', () => {
    const p = lxcInfoProblem(
      129,
      result({ code: 127, stderr: 'timeout: failed to run command ‘lxc-info’: No such file or directory\n' }),
    );
    expect(p).toMatch(/^`lxc-info` was not found on kpro5 \(exit 127/);
    expect(p).not.toMatch(/not running/);
  });
  it('exit 126 → found but could not be run', () => {
    expect(lxcInfoProblem(129, result({ code: 126, stderr: 'Permission denied' }))).toMatch(
      /`lxc-info` on kpro5 could not be run \(exit 126: Permission denied\)/,
    );
  });
  it('another exit code → the exit code and the first line it printed', () => {
    expect(lxcInfoProblem(129, result({ code: 1, stderr: "129 doesn't exist\nmore\n" }))).toBe(
      "`lxc-info -n 129 -p` failed on kpro5 (exit 1: 129 doesn't exist)",
    );
  });
  it('exit 0 without a PID → the container is not running', () => {
    expect(lxcInfoProblem(129, result({ code: 0, stdout: 'State:          STOPPED\n' }))).toMatch(
      /^container 129 is not running on kpro5 \(`lxc-info -n 129 -p` printed no PID\)/,
    );
  });
  it('exit 0 with a PID → no problem', () => {
    expect(lxcInfoProblem(129, result({ code: 0, stdout: 'PID:            81234\n' }))).toBeNull();
  });
});

describe('initReadingProblem', () => {
  const read = (text: string) => parseProcReadings(text);
  it('a readable init that is PID 1 of its namespace → no problem', () => {
    expect(initReadingProblem(129, 81234, read(reading({ pid: 81234 })))).toBeNull();
  });
  it('the init exited after lxc-info answered', () => {
    expect(initReadingProblem(129, 81234, read(reading({ pid: 81234, stat: false, nspid: null, ns: '' })))).toMatch(
      /host PID 81234 .* is gone/,
    );
  });
  it('no NSpid line (kernel older than 4.1)', () => {
    expect(initReadingProblem(129, 81234, read(reading({ pid: 81234, nspid: null })))).toMatch(
      /\/proc\/81234\/status has no NSpid line/,
    );
  });
  it('not PID 1 of its namespace: lxc-info named another process', () => {
    expect(initReadingProblem(129, 81234, read(reading({ pid: 81234, nspid: '81234\t7' })))).toMatch(
      /host PID 81234 is not PID 1 of its PID namespace \(NSpid 81234 7\)/,
    );
  });
  it('the namespace link is unreadable (the login may not read it)', () => {
    expect(initReadingProblem(129, 81234, read(reading({ pid: 81234, ns: '' })))).toMatch(
      /`readlink \/proc\/81234\/ns\/pid` printed nothing/,
    );
  });
  it('an init outside the container’s cgroup lxc/<vmid>, or whose cgroup could not be read, does not name its namespace', () => {
    expect(initReadingProblem(129, 81234, read(reading({ pid: 81234, cgroup: '0::/lxc/130/ns\n' })))).toMatch(
      /host PID 81234 is not in container 129's cgroup \(lxc\/129\): its cgroup is `0::\/lxc\/130\/ns`/,
    );
    expect(initReadingProblem(129, 81234, read(reading({ pid: 81234, cgroup: null })))).toMatch(
      /\/proc\/81234\/cgroup could not be read/,
    );
  });
  it('the read was cut short', () => {
    expect(initReadingProblem(129, 81234, read(reading({ pid: 81234, ns: '', done: false })))).toMatch(
      /the read of \/proc\/81234 was cut short/,
    );
  });
});
