import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, readlinkSync } from 'node:fs';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseProcStat } from '../../src/gpu/parse/index.ts';
import { shellJoin } from '../../src/text/shell-quote.ts';
import {
  CONSTANT_WORDS,
  READ_PROCS_SCRIPT,
  assertSafeArgv,
  containerConfig,
  containerInitPid,
  gpuReset,
  hostGpuApps,
  hostGpuReport,
  parseLxcInitPid,
  parsePersistenceMode,
  parseProcReadings,
  persistenceMode,
  readProcs,
  setPersistence,
} from '../../src/agent-grammar/templates/unstick-commands.ts';
import { TP0, readProcsOutput } from './seed-fleet.ts';

const t = { timeoutMs: 15_000, incidentId: 'inc_20261130_092000_k3x9q2', approvalId: 'none' };

describe('command templates', () => {
  it('are the literal commands of the runbook', () => {
    expect(shellJoin(containerInitPid(129, t).argv)).toBe('lxc-info -n 129 -p');
    // GPUs are named by UUID: an index names whatever GPU holds it at run time.
    const U = 'GPU-0d6e7c1a-2b3f-4a5b-8c9d-0e1f2a3b4c5d';
    expect(shellJoin(hostGpuApps(U, t).argv)).toBe(
      `nvidia-smi '--query-compute-apps=gpu_uuid,pid,process_name,used_memory' '--format=csv,noheader,nounits' -i ${U}`,
    );
    expect(shellJoin(persistenceMode(U, t).argv)).toBe(
      `nvidia-smi '--query-gpu=index,persistence_mode' '--format=csv,noheader' -i ${U}`,
    );
    expect(shellJoin(setPersistence(U, false, t).argv)).toBe(`nvidia-smi -pm 0 -i ${U}`);
    expect(shellJoin(gpuReset(U, t).argv)).toBe(`nvidia-smi --gpu-reset -i ${U}`);
    expect(shellJoin(setPersistence(U, true, t).argv)).toBe(`nvidia-smi -pm 1 -i ${U}`);
    expect(shellJoin(containerConfig(129, t).argv)).toBe('pct config 129');
    expect(readProcs([57, 63], t).argv).toEqual(['sh', '-c', READ_PROCS_SCRIPT, 'sh', '57', '63']);
  });

  it('refuse PIDs that would signal a group or everything, and non-integers', () => {
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 60])
      expect(() => readProcs([57, bad], t)).toThrow(/positive integer/);
    expect(() => readProcs([], t)).toThrow(/No PIDs/);
    for (const bad of ['2', 'GPU-x', '00000000:01:00.0', 'GPU-0d6e7c1a-2b3f-4a5b-8c9d-0e1f2a3b4c5d;id'])
      expect(() => gpuReset(bad, t)).toThrow(/by its UUID/);
    expect(() => containerInitPid(0, t)).toThrow(/container id/);
  });

  it('every argv word is a template constant or an integer (property)', () => {
    const pid = fc.integer({ min: 1, max: 4_194_304 });
    fc.assert(
      fc.property(fc.array(pid, { minLength: 1, maxLength: 16 }), fc.uuid(), fc.boolean(), (pids, u, on) => {
        const gpu = `GPU-${u}`;
        const specs = [
          readProcs(pids, t),
          containerInitPid(pids[0] ?? 1, t),
          hostGpuApps(gpu, t),
          persistenceMode(gpu, t),
          setPersistence(gpu, on, t),
          gpuReset(gpu, t),
          containerConfig(pids[0] ?? 1, t),
          hostGpuReport(t),
        ];
        for (const s of specs) {
          for (const w of s.argv) expect(CONSTANT_WORDS.has(w) || /^\d+$/.test(w) || w === gpu).toBe(true);
          expect(() => assertSafeArgv(s.argv)).not.toThrow();
        }
      }),
    );
  });

  it('assertSafeArgv refuses anything else', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1 }), (w) => {
        fc.pre(!CONSTANT_WORDS.has(w) && !/^(0|[1-9]\d{0,14})$/.test(w));
        expect(() => assertSafeArgv(['kill', '-s', 'KILL', w])).toThrow(/not from a fixed template/);
      }),
    );
    expect(() => assertSafeArgv(['kill', '-s', 'KILL', '57;reboot'])).toThrow();
    expect(() => assertSafeArgv(['nvidia-smi', '-r'])).toThrow();
  });
});

describe('readProcs on this machine (real /proc, real sh, od, grep, readlink)', () => {
  let child: ReturnType<typeof spawn>;
  beforeAll(async () => {
    // A process whose argv has spaces, a `)` and a newline: what a hex encoding is for.
    child = spawn('sleep', ['30'], { argv0: 'sglang::scheduler_TP0 (rank 0)\nx' } as Parameters<typeof spawn>[2]);
    await new Promise((r) => setTimeout(r, 100));
  });
  afterAll(() => child.kill('SIGKILL'));

  it('prints identity, namespace and cmdline for live PIDs and nothing for a gone one', () => {
    const pid = child.pid ?? 0;
    const out = spawnSync('sh', readProcs([pid, 4_000_000], t).argv.slice(1), { encoding: 'utf8' }).stdout;
    const r = parseProcReadings(out);
    expect(r.complete).toBe(true);
    const [live, gone] = r.readings;
    const stat = parseProcStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
    expect(stat.ok && live?.stat?.startTimeTicks === stat.value.startTimeTicks).toBe(true);
    expect(live?.pid).toBe(pid);
    expect(live?.nsPids?.[0]).toBe(pid);
    expect(live?.uid).toBe(process.getuid?.());
    expect(live?.pidNs).toBe(readlinkSync(`/proc/${pid}/ns/pid`));
    expect(live?.cmdline).toBe('sglang::scheduler_TP0 (rank 0)\nx 30');
    expect(live?.cgroup).toBe(readFileSync(`/proc/${pid}/cgroup`, 'utf8'));
    expect(gone).toEqual({ pid: 4_000_000, stat: null, nsPids: null, uid: null, pidNs: null, cmdline: null });
  });

  it('says when the output was cut short', () => {
    const out = readProcsOutput([TP0.pid], [TP0], { done: false });
    const r = parseProcReadings(out);
    expect(r.complete).toBe(false);
    expect(r.readings[0]?.stat?.startTimeTicks).toBe(TP0.start);
  });

  it('ignores a stat line that belongs to another PID', () => {
    const out = readProcsOutput([TP0.pid], [TP0]).replace(`@pid ${TP0.pid}`, '@pid 57');
    expect(parseProcReadings(out).readings[0]?.stat).toBeNull();
  });
});

describe('small parsers', () => {
  it('lxc-info -p', () => {
    expect(parseLxcInitPid('PID:            811900\n')).toBe(811_900);
    expect(parseLxcInitPid('State:          STOPPED\n')).toBeNull();
    expect(parseLxcInitPid('')).toBeNull();
  });
  it('persistence mode', () => {
    expect(parsePersistenceMode('2, Enabled\n')).toBe(true);
    expect(parsePersistenceMode('2, Disabled\n')).toBe(false);
    expect(parsePersistenceMode('2, [N/A]\n')).toBeNull();
  });
});

describe('readProcs reads the launchers above the holders (real /proc, real sh)', () => {
  const LAUNCH = 'python3 -m sglang.launch_server --tp-size 8 --enable-hierarchical-cache --hicache-size 300';
  const HOSTILE = `python3 -m sglang.launch_server \`reboot\` <!channel>\n@done\n@pid 1\n${'y'.repeat(10_000)} --hicache-size 300`;
  const kids: Array<ReturnType<typeof spawn>> = [];
  /** A `sh` whose argv[0] is `title`, with one `sleep` child (the rank); resolves the child's PID. */
  async function launcher(title: string): Promise<{ parent: number; rank: number }> {
    const p = spawn('sh', ['-c', 'sleep 30 & echo $!; wait', 'sh'], {
      argv0: title,
      stdio: ['ignore', 'pipe', 'ignore'],
    } as Parameters<typeof spawn>[2]);
    kids.push(p);
    const rank = await new Promise<number>((resolve) =>
      p.stdout?.once('data', (d: Buffer) => resolve(Number(d.toString().trim()))),
    );
    return { parent: p.pid ?? 0, rank };
  }
  afterAll(() => {
    for (const k of kids) if (k.pid) spawnSync('pkill', ['-KILL', '-P', String(k.pid)]);
    for (const k of kids) k.kill('SIGKILL');
  });

  it("names each holder's parent chain, nearest first, with the launcher's full command line", async () => {
    const { parent, rank } = await launcher(LAUNCH);
    const r = parseProcReadings(spawnSync('sh', readProcs([rank], t).argv.slice(1), { encoding: 'utf8' }).stdout);
    expect(r.complete).toBe(true);
    const [reading] = r.readings;
    expect(reading?.parents?.[0]).toEqual({ pid: parent, cmdline: `${LAUNCH} -c sleep 30 & echo $!; wait sh` });
    // The walk goes on up (this test runner, …) but never reaches the host's PID 1, and is bounded.
    expect(reading?.parents?.length).toBeGreaterThan(1);
    expect(reading?.parents?.length).toBeLessThanOrEqual(4);
    expect(reading?.parents?.map((p) => p.pid)).not.toContain(1);
  });

  it('ranks under one launcher: the launcher and everything above it are named once, under the first rank', async () => {
    const p = spawn('sh', ['-c', 'sleep 30 & echo $!; sleep 30 & echo $!; wait', 'sh'], {
      argv0: LAUNCH,
      stdio: ['ignore', 'pipe', 'ignore'],
    } as Parameters<typeof spawn>[2]);
    kids.push(p);
    let buf = '';
    const ranks = await new Promise<number[]>((resolve) =>
      p.stdout?.on('data', (d: Buffer) => {
        buf += d.toString();
        const l = buf.trim().split('\n');
        if (l.length >= 2) resolve(l.map(Number));
      }),
    );
    const r = parseProcReadings(
      spawnSync('sh', readProcs(ranks, t).argv.slice(1), { encoding: 'utf8' }).stdout,
    ).readings;
    expect(r[0]?.parents?.[0]).toEqual({
      pid: p.pid,
      cmdline: `${LAUNCH} -c sleep 30 & echo $!; sleep 30 & echo $!; wait sh`,
    });
    expect(r[1]?.parents).toBeUndefined();
  });

  it('a 10 kB command line with newlines, backticks and forged tags stays one bounded field, cut at a whole argument', async () => {
    const { parent, rank } = await launcher(HOSTILE);
    const r = parseProcReadings(
      spawnSync('sh', readProcs([rank, parent], t).argv.slice(1), { encoding: 'utf8' }).stdout,
    );
    expect(r.complete).toBe(true);
    expect(r.readings.map((x) => x.pid)).toEqual([rank, parent]);
    const own = r.readings[1]?.cmdline ?? '';
    const seenAbove = r.readings[0]?.parents?.[0]?.cmdline ?? '';
    for (const c of [own, seenAbove]) {
      // The argv[0] alone is longer than the cap: it is kept cut, marked with … so no cut value reads as a number.
      expect(c.length).toBe(8193);
      expect(c.endsWith('y…')).toBe(true);
      expect(c.startsWith('python3 -m sglang.launch_server `reboot` <!channel>\n@done\n@pid 1\n')).toBe(true);
    }
  });

  it('a parent cut short keeps only its whole arguments, so a cut number is never read', () => {
    const hex = (s: string): string => Buffer.from(s).toString('hex');
    const args = `python3\0-m\0sglang.launch_server\0--tp-size\0${'8'.repeat(3)}\0--hicache-size\0${'3'.repeat(8192)}`;
    const out = `@pid 7\n@cmdline 7 ${hex(args.slice(0, 8193))}\n@parent 7 6 ${hex(args.slice(0, 8193))}\n@done\n`;
    const r = parseProcReadings(out).readings[0];
    expect(r?.cmdline).toBe('python3 -m sglang.launch_server --tp-size 888 --hicache-size');
    expect(r?.parents).toEqual([{ pid: 6, cmdline: 'python3 -m sglang.launch_server --tp-size 888 --hicache-size' }]);
  });
});
