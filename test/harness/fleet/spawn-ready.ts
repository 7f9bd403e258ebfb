/** Spawns a helper process and waits for its first stdout line (its "ready" report). */
import { type ChildProcess, spawn } from 'node:child_process';
import { openSync, closeSync } from 'node:fs';

export interface Ready {
  child: ChildProcess;
  line: string;
  exited: Promise<{ code: number | null; signal: string | null }>;
}

export async function spawnReady(
  file: string,
  args: string[],
  o: { env: NodeJS.ProcessEnv; stderrPath: string; timeoutMs?: number; cwd?: string },
): Promise<Ready> {
  const errFd = openSync(o.stderrPath, 'a');
  let child: ChildProcess;
  try {
    child = spawn(file, args, { env: o.env, cwd: o.cwd ?? '/', detached: true, stdio: ['ignore', 'pipe', errFd] });
  } finally {
    closeSync(errFd);
  }
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
