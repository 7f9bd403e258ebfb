/**
 * `npm run demo -- [FILE] [--tty] [--port N]`: starts a scenario's fleet (default S3) with the
 * real bot, worker and Redis and our fake Slack, and lets you act as any Slack user of the
 * scenario in a local web page (URL printed) and, with --tty, at a terminal prompt:
 *
 *   alice> /gpu status ct129
 *   alice> as bob            (switch user)
 *   bob> click approve       (latest approval card)
 *   bob> show                (the threads, as Slack would show them)
 *   bob> gpus | users | help | quit
 *
 * Ctrl-C stops everything it started (fleet processes, sshd, servers, Redis keys).
 */
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { startDemo, type Demo, type DemoMessage } from './demo-server.ts';
import { REDIS_URL } from '../harness/stack.ts';

const HERE = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const tty = args.includes('--tty');
const portArg = args.indexOf('--port');
const port = portArg >= 0 ? Number(args[portArg + 1]) : 0;
const file =
  args.find((a, i) => !a.startsWith('--') && (portArg < 0 || i !== portArg + 1)) ??
  join(HERE, 's3-host-level-approval.yaml');

const out = (s: string) => process.stdout.write(`${s}\n`);
out(`gpu-medic demo: starting ${file} (fleet, Redis queues, bot, worker, fake Slack)…`);

let demo: Demo;
try {
  demo = await startDemo(file, { port });
} catch (e) {
  process.stderr.write(`demo could not start: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
}

let stopping = false;
async function shutdown(code = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  out('\nstopping: fleet, bot, worker, servers…');
  await demo.close().catch((e: unknown) => process.stderr.write(`stop: ${String(e)}\n`));
  out('stopped.');
  process.exit(code);
}
process.on('SIGINT', () => void shutdown(0));
process.on('SIGTERM', () => void shutdown(0));

const s0 = demo.state();
out(`\n${s0.scenario.name}${s0.scenario.pending ? ` (pending: ${s0.scenario.pending})` : ''}`);
if (s0.scenario.description) out(s0.scenario.description.trim());
out(
  `users: ${s0.users.map((u) => `${u.name} (${u.id})`).join(', ')}; approvers: ${demo.runtime.approverIds.join(', ') || 'none'}`,
);
out(
  `machines: ${[...demo.runtime.scenario.fleet.hosts.map((h) => h.id), ...demo.runtime.scenario.fleet.containers.map((c) => c.id)].join(', ')}`,
);
// Where the run's incidents live while it runs, so the post-mortem export can be tried: the exact CLI line.
const prefix = demo.runtime.stack.prefix;
out(`redis: ${REDIS_URL} · key prefix ${prefix} (removed when the demo stops)`);
out(`list incidents:  GPU_MEDIC_PREFIX=${prefix} REDIS_URL=${REDIS_URL} npm run -s cli -- incidents`);
out(`export one:      GPU_MEDIC_PREFIX=${prefix} REDIS_URL=${REDIS_URL} npm run -s cli -- incident <id> --markdown`);
out(`\nopen ${demo.url} in a browser${tty ? ', or type here' : ''}. Ctrl-C stops everything.`);

if (tty) {
  let user = s0.users[0]?.name ?? 'alice';
  const rl = createInterface({ input: process.stdin, output: process.stdout, prompt: `${user}> ` });
  const seen = new Map<string, string>();
  const fmt = (m: DemoMessage, reply: boolean) =>
    `${reply ? '    └ ' : '• '}${m.text.split('\n').join(`\n${reply ? '      ' : '  '}`)}${m.buttons.length > 0 ? `\n      [${m.buttons.map((b) => b.which).join('] [')}]` : ''}`;
  const printNew = (): boolean => {
    const st = demo.state();
    const lines: string[] = [];
    for (const t of st.threads) {
      for (const [m, reply] of [[t.parent, false], ...t.replies.map((r) => [r, true] as const)] as Array<
        [DemoMessage, boolean]
      >) {
        const key = m.ts;
        const sig = `${m.text}|${m.edits}`;
        if (seen.get(key) !== sig) {
          seen.set(key, sig);
          lines.push(fmt(m, reply));
        }
      }
    }
    for (const n of st.private) {
      const key = `p${n.at}${n.kind}${n.text}`;
      if (!seen.has(key)) {
        seen.set(key, '');
        lines.push(`  (only ${n.user} sees) ${n.text}`);
      }
    }
    if (lines.length === 0) return false;
    process.stdout.write('\r\x1b[K');
    out(lines.join('\n'));
    rl.prompt(true);
    return true;
  };
  const timer = setInterval(printNew, 500);
  rl.prompt();
  rl.on('line', (line) => {
    void (async () => {
      const l = line.trim();
      const [w0, w1] = l.split(/\s+/);
      if (l === '') {
        /* nothing */
      } else if (l.startsWith('/gpu')) {
        await demo.command(user, l);
      } else if (w0 === 'click' && (w1 === 'approve' || w1 === 'deny')) {
        await demo.click(user, w1);
      } else if ((w0 === 'as' || w0 === 'user') && w1 !== undefined) {
        if (demo.state().users.some((u) => u.name === w1)) user = w1;
        else
          out(
            `no user ${w1}; users: ${demo
              .state()
              .users.map((u) => u.name)
              .join(', ')}`,
          );
      } else if (demo.state().users.some((u) => u.name === w0) && w1 === undefined) {
        user = w0 ?? user;
      } else if (w0 === 'show') {
        seen.clear();
        printNew();
      } else if (w0 === 'gpus') {
        for (const [h, g] of Object.entries(demo.state().gpuMemory))
          out(`${h}: ${g.map((x) => `${x.index}:${x.usedMiB}`).join('  ')} MiB`);
      } else if (w0 === 'users') {
        out(
          demo
            .state()
            .users.map((u) => `${u.name} ${u.id}`)
            .join('\n'),
        );
      } else if (w0 === 'quit' || w0 === 'exit') {
        clearInterval(timer);
        rl.close();
        return;
      } else {
        out('commands: /gpu …, click approve|deny, as <user>, show, gpus, users, quit');
      }
      rl.setPrompt(`${user}> `);
      if (!printNew()) rl.prompt();
    })();
  });
  rl.on('SIGINT', () => void shutdown(0));
  rl.on('close', () => {
    clearInterval(timer);
    void shutdown(0);
  });
}
