/**
 * A worker as its own OS process (`node dist/src/main.js worker`, the compiled entry point), configured only by
 * environment and an inventory file, as a deployed worker is: so a test can SIGKILL it (a crash: no
 * close, no cleanup, its BullMQ job locks left to lapse) and start another on the same Redis.
 */
import type { ChildProcess } from 'node:child_process';
import { ROOT, spawnMain } from './dist.ts';

export interface WorkerChild {
  pid: number;
  /** Everything it printed (pino JSON lines, one per line). */
  output(): string;
  alive(): boolean;
  /** SIGKILL, as a crash; resolves once it is gone. */
  kill(): Promise<void>;
  /** SIGTERM (its own shutdown), SIGKILL after `graceMs`; resolves once it is gone. */
  stop(graceMs?: number): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Starts a worker process with exactly `env` (plus PATH and HOME) and waits until it says its workers run. */
export async function startWorkerChild(
  env: Record<string, string>,
  o: { readyTimeoutMs?: number; onOutput?: (chunk: string) => void } = {},
): Promise<WorkerChild> {
  const chunks: string[] = [];
  const child: ChildProcess = await spawnMain(['worker'], {
    cwd: ROOT,
    // Shell lines unless `env` asks for the agent: most tests are not about it (agent hosts have their own).
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      GPU_MEDIC_SSH_ACCESS: 'root-shell',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const keep = (c: Buffer): void => {
    const s = c.toString();
    chunks.push(s);
    o.onOutput?.(s);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let exited = false;
  const gone = new Promise<void>((r) => child.once('exit', () => r()));
  void gone.then(() => {
    exited = true;
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error('worker process did not start');
  const proc: WorkerChild = {
    pid,
    output: () => chunks.join(''),
    alive: () => !exited,
    async kill() {
      if (!exited) process.kill(pid, 'SIGKILL');
      await gone;
    },
    async stop(graceMs = 10_000) {
      if (exited) return;
      process.kill(pid, 'SIGTERM');
      const t = setTimeout(() => {
        if (!exited) process.kill(pid, 'SIGKILL');
      }, graceMs);
      await gone;
      clearTimeout(t);
    },
  };
  // A loaded machine takes a while to start a worker: bounded, generous.
  const until = Date.now() + (o.readyTimeoutMs ?? 90_000);
  while (!proc.output().includes('workers started')) {
    if (!proc.alive()) throw new Error(`worker process exited at start:\n${proc.output().slice(-3000)}`);
    if (Date.now() > until) {
      await proc.kill();
      throw new Error(`worker process not ready in ${o.readyTimeoutMs ?? 90_000} ms:\n${proc.output().slice(-3000)}`);
    }
    await sleep(25);
  }
  return proc;
}
