/**
 * The fleet's tool server: one Node process per fleet answering every machine's fake `nvidia-smi`
 * and `free` (see tool-client.c for the protocol). A call then costs a fork of a small C program
 * and a few milliseconds here, instead of a Node start (~85 ms of CPU) per call, so the fleet no
 * longer saturates the cores that the system under test shares with it. Outputs are the same
 * functions' (run-tool.ts), byte for byte; test/fleet/tool-server.test.ts checks them against the
 * standalone tool.
 *
 * usage: node tool-server.mjs SOCKET PARENT_PID   prints "ready" once listening; exits when the
 * parent is gone (a test process that died without fleet.stop()).
 */
import { chmodSync, existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { machineContextAt } from './machine-context.ts';
import { isServedTool, runTool } from './run-tool.ts';

const [socketPath, parentArg] = process.argv.slice(2);
if (socketPath === undefined || parentArg === undefined) {
  process.stderr.write('usage: tool-server SOCKET PARENT_PID\n');
  process.exit(2);
}
const parent = Number(parentArg);

/** A hung call's connection is dropped after this long, as the standalone tool exits after 10 min. */
const HANG_LIMIT_MS = 600_000;

function answer(sock: Socket, code: number, stdout: string, stderr: string): void {
  const out = Buffer.from(stdout, 'utf8');
  const err = Buffer.from(stderr, 'utf8');
  sock.end(Buffer.concat([Buffer.from(`${code} ${out.length} ${err.length}\n`), out, err]));
}

/** Field `n` (1-based, after the command) of /proc/<pid>/stat, or null when it is gone. */
function statField(pid: string, n: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[n - 3] ?? null;
  } catch {
    return null;
  }
}

/**
 * A dropped connection (`m/<host>/drop`, fleet.setDrop): SIGKILLs every per-connection sshd under
 * the host's listener (its PidFile), here, while the nvidia-smi call that found the flag has only
 * just started; the listener stays. The client sees its connection close mid-command, before any
 * timeout of the command could end it. The command itself is left running, as a real drop leaves it.
 */
function dropConnections(machineDir: string): void {
  let listener: string;
  try {
    listener = readFileSync(join(machineDir, 'sshd', 'sshd.pid'), 'utf8').trim();
  } catch {
    return; // no sshd running: nothing to drop
  }
  const children = new Map<string, string[]>();
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const ppid = statField(pid, 4);
    if (ppid !== null) children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  }
  const under: string[] = [];
  const stack = [...(children.get(listener) ?? [])];
  while (stack.length > 0) {
    const pid = stack.pop() as string;
    let comm = '';
    try {
      comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    } catch {
      continue;
    }
    if (comm !== 'sshd') continue; // the session's command: below the sshd processes, left alone
    under.push(pid);
    stack.push(...(children.get(pid) ?? []));
  }
  for (const pid of under) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

function serve(sock: Socket): void {
  const chunks: Buffer[] = [];
  sock.on('data', (c: Buffer) => chunks.push(c));
  sock.on('error', () => undefined);
  sock.on('end', () => {
    const fields = Buffer.concat(chunks).toString('utf8').split('\0');
    fields.pop(); // every field ends with \0
    const [tool, dir, ...argv] = fields;
    if (tool === undefined || dir === undefined || !isServedTool(tool)) {
      answer(sock, 255, '', `fleet tool server: bad request for ${tool ?? '?'}\n`);
      return;
    }
    if (tool === 'nvidia-smi' && existsSync(join(dir, 'drop'))) dropConnections(dir);
    try {
      const r = runTool(tool, argv, machineContextAt(dir, { hostProc: '/proc' }));
      if (r === 'hang') {
        // No answer: the client blocks until the remote `timeout` kills it, then the socket closes.
        const t = setTimeout(() => sock.destroy(), HANG_LIMIT_MS);
        sock.once('close', () => clearTimeout(t));
        return;
      }
      answer(sock, r.exitCode, r.stdout, r.stderr);
    } catch (e) {
      answer(
        sock,
        255,
        '',
        `fleet tool server: ${tool} failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`,
      );
    }
  });
}

rmSync(socketPath, { force: true });
const server = createServer({ allowHalfOpen: true }, serve);
server.listen(socketPath, () => {
  // Tools may run as a non-root login (fleetuser).
  chmodSync(socketPath, 0o777);
  process.stdout.write('ready\n');
});
setInterval(() => {
  try {
    process.kill(parent, 0);
  } catch {
    rmSync(socketPath, { force: true });
    process.exit(0);
  }
}, 1000).unref();
