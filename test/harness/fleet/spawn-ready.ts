/** Spawns a helper process and waits for its first stdout line (its "ready" report). */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, rmSync } from 'node:fs';

export interface Ready {
  child: ChildProcess;
  line: string;
  exited: Promise<{ code: number | null; signal: string | null }>;
}

/** Starts a helper in its own process group, its stderr appended to a file. */
function spawnDetached(
  file: string,
  args: string[],
  o: { env: NodeJS.ProcessEnv; stderrPath: string; cwd?: string },
  stdout: 'pipe' | 'ignore',
): ChildProcess {
  const errFd = openSync(o.stderrPath, 'a');
  try {
    return spawn(file, args, { env: o.env, cwd: o.cwd ?? '/', detached: true, stdio: ['ignore', stdout, errFd] });
  } finally {
    closeSync(errFd);
  }
}

export async function spawnReady(
  file: string,
  args: string[],
  o: { env: NodeJS.ProcessEnv; stderrPath: string; timeoutMs?: number; cwd?: string },
): Promise<Ready> {
  const child = spawnDetached(file, args, o, 'pipe');
  const exited = new Promise<{ code: number | null; signal: string | null }>((res) => {
    child.once('exit', (code, signal) => res({ code, signal }));
  });
  const stdout = child.stdout;
  if (stdout === null) throw new Error(`${file}: no stdout`);
  const line = await new Promise<string>((res, rej) => {
    let buf = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      rej(new Error(`${file} ${args.join(' ')}: not ready after ${o.timeoutMs ?? 10_000} ms (see ${o.stderrPath})`));
    }, o.timeoutMs ?? 10_000);
    const onData = (chunk: Buffer) => {
      buf += chunk.toString('utf8');
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      clearTimeout(timer);
      stdout.off('data', onData);
      res(buf.slice(0, nl));
    };
    stdout.on('data', onData);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      rej(
        new Error(
          `${file} ${args.join(' ')} exited (code ${code}, signal ${signal}) before it was ready (see ${o.stderrPath})`,
        ),
      );
    });
  });
  // Nothing more is read: let the pipe go so the test process is not held open by it.
  stdout.destroy();
  child.unref();
  return { child, line, exited };
}

/**
 * Runs a helper that writes its report to a file (atomically: tmp then rename) and exits, and
 * returns the report. Unlike a stdout line, the report does not depend on whatever stands between
 * the helper and us (lxc-attach, nsenter) relaying its output before passing its exit on.
 */
export async function spawnReport(
  file: string,
  args: string[],
  o: { env: NodeJS.ProcessEnv; reportPath: string; stderrPath: string; timeoutMs?: number; cwd?: string },
): Promise<string> {
  rmSync(o.reportPath, { force: true });
  const child = spawnDetached(file, args, o, 'ignore');
  const timeoutMs = o.timeoutMs ?? 30_000;
  const how = await new Promise<{ code: number | null; signal: string | null } | 'timeout'>((res) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      res('timeout');
    }, timeoutMs);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      res({ code, signal });
    });
  });
  let report: string | null = null;
  try {
    report = readFileSync(o.reportPath, 'utf8');
  } catch {
    // no report: said below
  }
  if (report !== null && how !== 'timeout') return report;
  let stderr = '';
  try {
    stderr = readFileSync(o.stderrPath, 'utf8').slice(-2000);
  } catch {
    // nothing written
  }
  const ended = how === 'timeout' ? `ran past ${timeoutMs} ms` : `exited (code ${how.code}, signal ${how.signal})`;
  throw new Error(`${file} ${args.join(' ')} ${ended} without its report (${o.stderrPath}):\n${stderr}`);
}
