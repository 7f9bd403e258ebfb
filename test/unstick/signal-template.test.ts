/**
 * The check-and-signal template (src/agent-grammar/templates/signal.ts): argv is constants and
 * integers only, and the script itself, run here on real processes, signals only a PID whose
 * start time, namespace and open GPU device still match.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  outcomeText,
  parseSignalReport,
  signalCommand,
  SIGNAL_SCRIPT,
  SIGNAL_WORDS,
  type SignalTarget,
} from '../../src/agent-grammar/templates/signal.ts';
import { CONSTANT_WORDS, assertSafeArgv } from '../../src/agent-grammar/templates/unstick-commands.ts';

const t = { timeoutMs: 15_000, incidentId: 'inc_20261130_092000_k3x9q2', approvalId: 'none' };
const NS = 'pid:[4026531836]';

function startOf(pid: number): number {
  const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[19]);
}

describe('signalCommand argv', () => {
  it('is the fixed script plus constant words and the integers it was given', () => {
    const spec = signalCommand('host', 'KILL', NS, [{ pid: 811_900, startTimeTicks: 48_113_902, containerPid: 57 }], t);
    expect(spec.argv).toEqual([
      'sh',
      '-c',
      SIGNAL_SCRIPT,
      'sh',
      'host',
      'KILL',
      '4026531836',
      '811900',
      '48113902',
      '57',
    ]);
    expect(
      signalCommand('container', 'TERM', null, [{ pid: 57, startTimeTicks: 9, containerPid: null }], t).argv.slice(4),
    ).toEqual(['container', 'TERM', '0', '57', '9', '0']);
  });

  it('every word is a template constant or a decimal integer, for any PIDs and start times (property)', () => {
    const target = fc.record({
      pid: fc.integer({ min: 1, max: 4_194_304 }),
      startTimeTicks: fc.integer({ min: 0, max: 2 ** 40 }),
      containerPid: fc.integer({ min: 1, max: 4_194_304 }),
    });
    fc.assert(
      fc.property(
        fc.array(target, { minLength: 1, maxLength: 16 }),
        fc.constantFrom('TERM' as const, 'KILL' as const),
        fc.boolean(),
        (ts, sig, host) => {
          const spec = signalCommand(host ? 'host' : 'container', sig, NS, ts, t);
          for (const w of spec.argv) expect(CONSTANT_WORDS.has(w) || /^\d+$/.test(w)).toBe(true);
          expect(() => assertSafeArgv(spec.argv)).not.toThrow();
          expect(spec.argv.slice(7).map(Number)).toEqual(
            ts.flatMap((x) => [x.pid, x.startTimeTicks, host ? x.containerPid : 0]),
          );
        },
      ),
    );
  });

  it('refuses what would signal a group or everything, no PIDs, and a host signal without the namespace', () => {
    for (const bad of [0, -1, 1.5, Number.NaN, 2 ** 60])
      expect(() =>
        signalCommand('container', 'KILL', NS, [{ pid: bad, startTimeTicks: 1, containerPid: null }], t),
      ).toThrow(/integer/);
    expect(() =>
      signalCommand('container', 'KILL', NS, [{ pid: 5, startTimeTicks: -1, containerPid: null }], t),
    ).toThrow(/start time/);
    expect(() => signalCommand('container', 'TERM', NS, [], t)).toThrow(/No PIDs/);
    expect(() => signalCommand('host', 'KILL', null, [{ pid: 5, startTimeTicks: 1, containerPid: 5 }], t)).toThrow(
      /PID namespace/,
    );
    expect(() => signalCommand('host', 'KILL', 'pid:[x]', [{ pid: 5, startTimeTicks: 1, containerPid: 5 }], t)).toThrow(
      /PID namespace/,
    );
    expect(() => signalCommand('host', 'KILL', NS, [{ pid: 5, startTimeTicks: 1, containerPid: null }], t)).toThrow(
      /container PID/,
    );
  });
});

describe('the script on this machine (real perl / python3 / sh, real /proc, real pidfd)', () => {
  let child: ReturnType<typeof spawn>;
  let pid: number;
  let bin: string;
  beforeAll(async () => {
    child = spawn('sleep', ['60'], { stdio: 'ignore' });
    await new Promise((r) => setTimeout(r, 100));
    pid = child.pid ?? 0;
    // A PATH with sh and coreutils but neither perl nor python3: a container without them.
    bin = mkdtempSync('/tmp/gpu-medic-noperl-');
    for (const b of ['sh', 'cat', 'readlink', 'kill', 'uname']) {
      const w = spawnSync('sh', ['-c', `command -v ${b}`], { encoding: 'utf8' }).stdout.trim();
      if (w.startsWith('/')) symlinkSync(w, join(bin, b));
    }
  });
  afterAll(() => {
    child.kill('SIGKILL');
    rmSync(bin, { recursive: true, force: true });
  });

  const run = (side: 'host' | 'container', targets: SignalTarget[], path?: string) => {
    const argv = signalCommand(side, 'TERM', readlinkSync(`/proc/${pid}/ns/pid`), targets, t).argv;
    const r = spawnSync('sh', argv.slice(1), {
      encoding: 'utf8',
      env: { ...process.env, ...(path ? { PATH: path } : {}) },
    });
    return {
      ...parseSignalReport(
        targets.map((x) => x.pid),
        r.stdout,
      ),
      code: r.status,
    };
  };

  it('host side: a changed start time is "PID reused", a gone PID "gone", and nothing is signalled', () => {
    const r = run('host', [
      { pid, startTimeTicks: startOf(pid) + 1, containerPid: pid },
      { pid: 4_000_000, startTimeTicks: 1, containerPid: 1 },
    ]);
    expect(r).toMatchObject({ method: 'pidfd', complete: true, code: 0 });
    expect(r.outcomes).toEqual([
      { pid, result: 'skipped', reason: 'pid_reused' },
      { pid: 4_000_000, result: 'gone' },
    ]);
    expect(child.exitCode).toBeNull();
    expect(startOf(pid)).toBeGreaterThan(0);
  });

  it('the same process without a /dev/nvidia* open is "not holding" and is not signalled', () => {
    const r = run('container', [{ pid, startTimeTicks: startOf(pid), containerPid: null }]);
    expect(r.outcomes).toEqual([{ pid, result: 'skipped', reason: 'not_holding' }]);
    expect(child.signalCode).toBeNull();
  });

  it('a process in another PID namespace than the one given is "wrong namespace"', () => {
    const argv = signalCommand(
      'container',
      'TERM',
      'pid:[1]',
      [{ pid, startTimeTicks: startOf(pid), containerPid: null }],
      t,
    ).argv;
    const out = spawnSync('sh', argv.slice(1), { encoding: 'utf8' }).stdout;
    expect(parseSignalReport([pid], out).outcomes).toEqual([{ pid, result: 'skipped', reason: 'wrong_namespace' }]);
  });

  it('in a container with neither perl nor python3 it still checks, and says the check was not race-free', () => {
    const r = run('container', [{ pid, startTimeTicks: startOf(pid) + 1, containerPid: null }], bin);
    expect(r.method).toBe('shell');
    expect(r.outcomes).toEqual([{ pid, result: 'skipped', reason: 'pid_reused' }]);
    expect(run('container', [{ pid, startTimeTicks: startOf(pid), containerPid: null }], bin).outcomes).toEqual([
      { pid, result: 'skipped', reason: 'not_holding' },
    ]);
  });

  it('on a host with neither, nothing is signalled and every PID says why', () => {
    const r = run('host', [{ pid, startTimeTicks: startOf(pid), containerPid: pid }], bin);
    expect(r.code).toBe(4);
    expect(r.outcomes).toEqual([{ pid, result: 'skipped', reason: 'no_pidfd' }]);
  });
});

describe('parseSignalReport', () => {
  it('reads every outcome word and never reports an unanswered PID as sent', () => {
    const out = [
      '@method pidfd perl',
      '@sig 1 sent',
      '@sig 2 gone',
      '@sig 3 reused',
      '@sig 4 not_holding',
      '@sig 5 wrong_ns',
      '@sig 6 init',
      '@sig 7 unreadable',
      '@sig 8 eperm',
      '@sig 9 failed EINVAL',
      '@sig 99 sent',
    ].join('\n');
    const r = parseSignalReport([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], out);
    expect(r.method).toBe('pidfd');
    expect(r.complete).toBe(false);
    expect(r.outcomes).toEqual([
      { pid: 1, result: 'sent' },
      { pid: 2, result: 'gone' },
      { pid: 3, result: 'skipped', reason: 'pid_reused' },
      { pid: 4, result: 'skipped', reason: 'not_holding' },
      { pid: 5, result: 'skipped', reason: 'wrong_namespace' },
      { pid: 6, result: 'skipped', reason: 'container_init' },
      { pid: 7, result: 'skipped', reason: 'unreadable' },
      { pid: 8, result: 'failed', reason: 'not_permitted', message: 'Operation not permitted' },
      { pid: 9, result: 'failed', reason: 'other', message: 'failed EINVAL' },
      { pid: 10, result: 'failed', reason: 'other', message: 'no answer for this PID (output cut short?)' },
    ]);
  });

  it('the words the three script bodies answer with are exactly the keys of SIGNAL_WORDS', () => {
    // Perl `return "w"` / `$r = "w"` / `? "w"`, Python `return "w"` / `"w" if` / `else "w"`, shell `echo w;`.
    const printed = new Set<string>();
    for (const m of SIGNAL_SCRIPT.matchAll(
      /(?:return |\$r = |why = |\? |: |else )"([a-z_]+)[" ]|"([a-z_]+)" if |echo ([a-z_]+)[;}]/g,
    ))
      printed.add(m[1] ?? m[2] ?? m[3] ?? '');
    expect([...printed].sort()).toEqual(Object.keys(SIGNAL_WORDS).sort());
    for (const w of Object.keys(SIGNAL_WORDS)) {
      const o = parseSignalReport([5], `@sig 5 ${w}\n@done\n`).outcomes[0];
      expect(o && outcomeText(o).startsWith(SIGNAL_WORDS[w as keyof typeof SIGNAL_WORDS].text)).toBe(true);
    }
  });

  it('the first answer for a PID counts (a repeated line cannot turn a skip into a send)', () => {
    expect(parseSignalReport([3], '@sig 3 reused\n@sig 3 sent\n@done\n').outcomes).toEqual([
      { pid: 3, result: 'skipped', reason: 'pid_reused' },
    ]);
  });
});

describe('a holder that freed on its own', () => {
  it('is said as "nothing was needed", whether it exited or closed its GPU devices; a refused one is not', () => {
    expect(outcomeText({ pid: 7, result: 'gone' })).toMatch(/nothing was needed/);
    expect(outcomeText({ pid: 7, result: 'skipped', reason: 'not_holding' })).toMatch(/nothing was needed/);
    expect(outcomeText({ pid: 7, result: 'skipped', reason: 'pid_reused' })).not.toMatch(/nothing was needed/);
    expect(outcomeText({ pid: 7, result: 'sent' })).not.toMatch(/nothing was needed/);
  });
});
