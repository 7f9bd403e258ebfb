/**
 * Each role started as a real process (the compiled build) next to a .env that holds everything,
 * as `npm run bot` / `npm run worker` and the systemd units start them: the worker has no Slack secret in its
 * environment or anywhere in its memory; the bot never opens a key file; both refuse to start
 * with the same full report as `config check`; HTTP mode listens on loopback unless told.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  constants,
  mkdtempSync,
  openSync,
  readFileSync,
  readlinkSync,
  readdirSync,
  readSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS_URL, newRedis, randomPrefix, removePrefix } from '../harness/redis-prefix.ts';
import { freePort } from '../harness/sshd.ts';
import { startFakeSlack, type FakeSlack } from '../harness/slack/fake-slack-api.ts';

import { buildDist, MAIN_JS } from './build.ts';

const FP = `SHA256:${'A'.repeat(43)}`;

interface Proc {
  child: ChildProcess;
  pid: number;
  output: () => string;
  gone: Promise<number | null>;
}

// The compiled build, as `npm run bot|worker`, the systemd units and the image run it.
beforeAll(() => buildDist(), 300_000);

/** `node dist/src/main.js <role>` in `cwd` with nothing but PATH and HOME inherited: settings come from cwd/.env. */
function startRole(role: string, cwd: string, env: Record<string, string> = {}, args: string[] = []): Proc {
  const chunks: string[] = [];
  const child = spawn(process.execPath, [MAIN_JS, role, ...args], {
    cwd,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (c: Buffer) => chunks.push(c.toString()));
  child.stderr?.on('data', (c: Buffer) => chunks.push(c.toString()));
  const gone = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  if (child.pid === undefined) throw new Error(`${role} did not start`);
  return { child, pid: child.pid, output: () => chunks.join(''), gone };
}

async function waitFor(p: Proc, needle: string, ms = 60_000): Promise<void> {
  const until = Date.now() + ms;
  while (!p.output().includes(needle)) {
    if (p.child.exitCode !== null) throw new Error(`exited ${p.child.exitCode} before "${needle}":\n${p.output()}`);
    if (Date.now() > until) throw new Error(`no "${needle}" within ${ms} ms:\n${p.output()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function stop(p: Proc): Promise<void> {
  if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  await p.gone;
}

/** Every readable private (anonymous, heap, stack) mapping of `pid`, searched for each needle. */
function memoryHolds(pid: number, needles: string[]): string[] {
  const found = new Set<string>();
  const bufs = needles.map((n) => Buffer.from(n));
  const longest = Math.max(...bufs.map((b) => b.length));
  const fd = openSync(`/proc/${pid}/mem`, 'r');
  const chunk = Buffer.alloc(1 << 20);
  try {
    for (const line of readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
      const m = /^([0-9a-f]+)-([0-9a-f]+) (r.)\S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
      if (!m) continue;
      const path = m[4] ?? '';
      if (path !== '' && !path.startsWith('[')) continue; // file-backed: code and libraries, not data we made
      let at = Number.parseInt(m[1] ?? '0', 16);
      const end = Number.parseInt(m[2] ?? '0', 16);
      while (at < end) {
        const len = Math.min(chunk.length, end - at);
        let n = 0;
        try {
          n = readSync(fd, chunk, 0, len, at);
        } catch {
          break; // a guard page or a mapping that went away
        }
        const view = chunk.subarray(0, n);
        bufs.forEach((b, i) => {
          if (view.includes(b)) found.add(needles[i] ?? '');
        });
        // Overlap the next read so that a needle across two chunks is still seen.
        at += n > longest ? n - longest : n || len;
      }
    }
  } finally {
    closeSync(fd);
  }
  return [...found];
}

/** Does anyone hold the FIFO open for reading (or wait in open() to read it)? */
function fifoHasReader(path: string): boolean {
  try {
    closeSync(openSync(path, constants.O_WRONLY | constants.O_NONBLOCK));
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENXIO') return false;
    throw e;
  }
}

const openFiles = (pid: number): string[] =>
  readdirSync(`/proc/${pid}/fd`).flatMap((fd) => {
    try {
      return [readlinkSync(`/proc/${pid}/fd/${fd}`)];
    } catch {
      return [];
    }
  });

describe('each role from a .env that holds everything (real processes)', () => {
  let dir: string;
  let slack: FakeSlack;
  let keyFifo: string;
  const prefix = randomPrefix('roles');
  const appToken = `xapp-1-${randomBytes(12).toString('hex')}`;
  const signingSecret = randomBytes(16).toString('hex');
  const workerSecret = randomBytes(32).toString('hex');
  const redis = newRedis();

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gpu-medic-roles-'));
    slack = await startFakeSlack({ botToken: `xoxb-${randomBytes(12).toString('hex')}` });
    // The key file is a FIFO: whoever opens it for reading is left waiting in open(), in plain sight.
    keyFifo = join(dir, 'id_ed25519');
    execFileSync('mkfifo', ['-m', '0600', keyFifo]);
    writeFileSync(
      join(dir, 'inventory.yaml'),
      `defaults:\n  keyFile: ${keyFifo}\nhosts:\n  - id: kpro5\n    site: lab\n    address: 192.0.2.15\n    hostKeys: [${FP}]\ncontainers:\n  - id: ct129\n    vmid: 129\n    host: kpro5\n`,
    );
    writeFileSync(
      join(dir, '.env'),
      [
        'GPU_MEDIC_MODE=http',
        `SLACK_BOT_TOKEN=${slack.botToken}`,
        `SLACK_APP_TOKEN=${appToken}`,
        `SLACK_SIGNING_SECRET=${signingSecret}`,
        `SLACK_API_URL=${slack.apiUrl}`,
        'PORT=0',
        `REDIS_URL=${REDIS_URL}`,
        `GPU_MEDIC_PREFIX=${prefix}`,
        'GPU_MEDIC_INVENTORY=./inventory.yaml',
        `GPU_MEDIC_HEALTH_FILE=${join(dir, 'health.json')}`,
        'GPU_MEDIC_SITES=lab',
        `GPU_MEDIC_WORKER_SECRET=${workerSecret}`,
        '',
      ].join('\n'),
    );
  });
  afterAll(async () => {
    await removePrefix(redis, prefix);
    redis.disconnect();
    await slack?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the worker starts, with no Slack secret in its environment or anywhere in its memory', async () => {
    const w = startRole('worker', dir, { GPU_MEDIC_HEALTH_FILE: join(dir, 'worker.json') });
    try {
      await waitFor(w, '"msg":"workers started"');
      const environ = readFileSync(`/proc/${w.pid}/environ`, 'utf8').split('\0');
      expect(environ.filter((kv) => kv.startsWith('SLACK_'))).toEqual([]);
      expect(memoryHolds(w.pid, [slack.botToken, appToken, signingSecret])).toEqual([]);
      // The same search finds the worker's own secret, read from the same file.
      expect(memoryHolds(w.pid, [workerSecret])).toEqual([workerSecret]);
      // The worker did read the same file: its own settings reached it.
      expect(w.output()).toContain('"sites":["lab"]');
    } finally {
      await stop(w);
    }
  });

  it("the bot starts holding its tokens (the memory search finds them) and not the worker's secret, and never opens the key file", async () => {
    const b = startRole('bot', dir, { GPU_MEDIC_HEALTH_FILE: join(dir, 'bot.json') });
    try {
      await waitFor(b, '"msg":"bot started"');
      expect(memoryHolds(b.pid, [slack.botToken, signingSecret, workerSecret]).sort()).toEqual(
        [slack.botToken, signingSecret].sort(),
      );
      expect(fifoHasReader(keyFifo)).toBe(false);
      expect(openFiles(b.pid)).not.toContain(keyFifo);
    } finally {
      await stop(b);
    }
    // The probe sees a reader when there is one.
    const reader = spawn('cat', [keyFifo], { stdio: 'ignore' });
    try {
      // One probe's answer is the result: a probe that finds the reader also ends it (its close is
      // cat's end of file), so a second probe races cat's exit.
      const until = Date.now() + 30_000;
      let seen = fifoHasReader(keyFifo);
      while (!seen && Date.now() < until) {
        await new Promise((r) => setTimeout(r, 20));
        seen = fifoHasReader(keyFifo);
      }
      expect(seen).toBe(true);
    } finally {
      reader.kill('SIGKILL');
    }
  });

  it('the worker refuses a Slack token in its own environment, naming it and not showing it', async () => {
    const w = startRole('worker', dir, { SLACK_BOT_TOKEN: slack.botToken });
    const code = await w.gone;
    expect(code).toBe(2);
    expect(w.output()).toContain("SLACK_BOT_TOKEN is in the worker's environment");
    expect(w.output()).not.toContain(slack.botToken);
  });

  it('HTTP mode listens on 127.0.0.1 unless GPU_MEDIC_BIND_ADDRESS says otherwise', async () => {
    const b = startRole('bot', dir, { GPU_MEDIC_HEALTH_FILE: join(dir, 'bot2.json') });
    try {
      await waitFor(b, '"msg":"bot started"');
      const port = Number(/"port":(\d+)/.exec(b.output())?.[1]);
      expect(port).toBeGreaterThan(0);
      expect(b.output()).toContain('"bind":"127.0.0.1"');
      // /proc/net/tcp: local address of every socket; a listener (state 0A) on 127.0.0.1 is 0100007F.
      const listening = readFileSync(`/proc/${b.pid}/net/tcp`, 'utf8')
        .split('\n')
        .map((l) => l.trim().split(/\s+/))
        .filter((f) => f[3] === '0A' && Number.parseInt((f[1] ?? '').split(':')[1] ?? '', 16) === port)
        .map((f) => f[1]?.split(':')[0]);
      expect(listening).toEqual(['0100007F']);
      const tcp6 = readFileSync(`/proc/${b.pid}/net/tcp6`, 'utf8');
      expect(
        tcp6
          .split('\n')
          .some((l) => l.includes(`:${port.toString(16).toUpperCase().padStart(4, '0')} `) && / 0A /.test(l)),
      ).toBe(false);
    } finally {
      await stop(b);
    }
  });
});

describe('a bot that cannot reach Redis at start says why', () => {
  it('names the URL and the reason (nothing listens there), without the password', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-noredis-'));
    const port = await freePort();
    writeFileSync(
      join(dir, 'inventory.yaml'),
      `defaults:\n  keyFile: /k\nhosts:\n  - id: kpro5\n    address: 192.0.2.15\n    hostKeys: [${FP}]\n`,
    );
    const slack = await startFakeSlack();
    const env = `GPU_MEDIC_MODE=http\nSLACK_BOT_TOKEN=${slack.botToken}\nSLACK_SIGNING_SECRET=0123456789abcdef\nSLACK_API_URL=${slack.apiUrl}\nPORT=0\nREDIS_URL=redis://:hunter2pass@127.0.0.1:${port}\n`;
    writeFileSync(join(dir, '.env'), env);
    const b = startRole('bot', dir, { GPU_MEDIC_HEALTH_FILE: join(dir, 'bot.json') });
    try {
      await waitFor(b, 'Redis not reachable at start');
      const line =
        b
          .output()
          .split('\n')
          .find((l) => l.includes('Redis not reachable at start')) ?? '';
      expect(line).toContain(
        `redis://***@127.0.0.1:${port}: connect ECONNREFUSED 127.0.0.1:${port} (nothing listens there: is Redis running?`,
      );
      expect(b.output()).not.toContain('hunter2pass');
    } finally {
      await stop(b);
      await slack.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('refusing to start: the same report as config check, every problem at once', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'gpu-medic-refuse-'));
    writeFileSync(
      join(dir, 'inventory.yaml'),
      `hosts:\n  - id: kpro5\n    adress: 10.0.0.5\n    hostKeys: [${FP}]\ncontainers:\n  - id: ct129\n    vmid: 129\n    host: kpro6\n`,
    );
    writeFileSync(
      join(dir, '.env'),
      'GPU_MEDIC_MODE=http\nSLACK_BOT_TOKEN=xoxb-1\nPORT=\nGPU_MEDIC_POLL_MS=fast\nGPU_MEDIC_SITES lab\n',
    );
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  for (const role of ['bot', 'worker', 'start'] as const) {
    it(`${role}: env and inventory problems together, exit 2, the lines of \`config check ${role}\``, async () => {
      const p = startRole(role, dir);
      expect(await p.gone).toBe(2);
      const check = startRole('config', dir, {}, ['check', role]);
      expect(await check.gone).toBe(1);
      const checkOut = check.output();
      const problems = (text: string): string[] => text.split('\n').filter((l) => l.startsWith('  - '));
      expect(problems(p.output())).toEqual(problems(checkOut));
      expect(p.output()).toMatch(new RegExp(`^gpu-medic ${role}: cannot start: \\d+ problems`));
      const out = p.output();
      expect(out).toContain('host kpro5: address is missing');
      expect(out).toContain('host kpro5: unknown field "adress"; did you mean address?');
      expect(out).toContain('container ct129: host "kpro6" is not in hosts; did you mean kpro5?');
      expect(out).toContain('.env line 5 is not KEY=value');
      if (role === 'worker') {
        expect(out).toContain('GPU_MEDIC_POLL_MS must be a whole number');
        expect(out).not.toContain('PORT'); // a bot setting: the worker does not read it
      } else {
        expect(out).toContain('PORT is empty');
        expect(out).toContain('SLACK_SIGNING_SECRET is required in http mode');
      }
    });
  }
});
