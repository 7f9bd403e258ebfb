/**
 * The bot and the worker as separate child processes (`node dist/src/main.js bot|worker`, the
 * compiled build, built first), exactly as deployed, so each one's memory can be read from /proc and the benchmark's own load
 * generator and fake Slack do not share their event loop.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { openSync, closeSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

import { buildDist } from '../test/deploy/build.ts';

let built: Promise<string> | null = null;

export type Role = 'bot' | 'worker';

export interface RoleProcess {
  role: Role;
  pid: number;
  logPath: string;
  /** Resident set now, KiB (VmRSS). */
  rssKiB(): number;
  /** Peak resident set since start, KiB (VmHWM). */
  peakKiB(): number;
  /** The last `n` warn/error log lines (level >= 40), for error reports. */
  problems(n?: number): string[];
  /** SIGTERM (graceful stop), SIGKILL by PID after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
}

function statusField(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
  if (!m) throw new Error(`no ${field} for pid ${pid}`);
  return Number(m[1]);
}

export { freePort } from '../test/harness/sshd.ts';

async function waitForLog(child: ChildProcess, logPath: string, needle: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = existsSync(logPath) ? readFileSync(logPath, 'utf8') : '';
    if (text.includes(needle)) return;
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`${logPath}: process exited before "${needle}":\n${text.slice(-2000)}`);
    if (Date.now() > deadline)
      throw new Error(`${logPath}: no "${needle}" within ${timeoutMs} ms:\n${text.slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * Starts one role. `env` is the whole environment the process gets (no inherited secrets or
 * `.env`: its cwd is `workDir`, which has none). Resolves once the role logged that it started.
 */
export async function startRole(
  role: Role,
  env: Record<string, string>,
  workDir: string,
  name: string,
): Promise<RoleProcess> {
  built ??= buildDist();
  return startBuild(await built, role, env, workDir, name);
}

/** As `startRole`, from the compiled entry point `main` of any build (bench/ack-builds.ts compares builds). */
export async function startBuild(
  main: string,
  role: Role,
  env: Record<string, string>,
  workDir: string,
  name: string,
): Promise<RoleProcess> {
  const logPath = join(workDir, `${name}.log`);
  const fd = openSync(logPath, 'a');
  const child = spawn(process.execPath, [main, role], {
    cwd: workDir,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', ...env },
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  const pid = child.pid;
  if (pid === undefined) throw new Error(`could not start ${name}`);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  try {
    await waitForLog(child, logPath, role === 'bot' ? '"msg":"bot started"' : '"msg":"workers started"', 60_000);
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
  return {
    role,
    pid,
    logPath,
    rssKiB: () => statusField(pid, 'VmRSS'),
    peakKiB: () => statusField(pid, 'VmHWM'),
    problems: (n = 3) =>
      readFileSync(logPath, 'utf8')
        .split('\n')
        .filter((l) => /"level":(4|5|6)0/.test(l))
        .slice(-n)
        .map((l) => l.slice(0, 600)),
    async stop(graceMs = 5000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(t);
    },
  };
}
