/**
 * A burst of signed slash commands from a process of its own, as Slack's requests come from
 * outside the bot: the acks it times measure the bot, not the test's own HTTP client and signing
 * sharing the bot's event loop.
 *
 * Child side: `node burst-client.mjs <config.json>` (this file bundled by esbuild) prints `READY`, sends every
 * command at once when a line arrives on stdin, prints one JSON line of results and exits.
 * Parent side: `sendBurst`.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleScript } from '../../harness/bundle-script.ts';
import { sendSlashCommand, type SlashCommandFields } from '../../harness/slack/signed-request.ts';

export interface BurstConfig {
  url: string;
  signingSecret: string;
  commands: SlashCommandFields[];
}

/** One command's answer; `error` when no HTTP answer came at all. */
export interface BurstAnswer {
  status: number;
  elapsedMs: number;
  json: unknown;
  error?: string;
}

const HERE = fileURLToPath(import.meta.url);

/** Sends `config.commands` at once from a child process; the answers come back in the same order. */
export async function sendBurst(config: BurstConfig, timeoutMs = 60_000): Promise<BurstAnswer[]> {
  const script = await bundleScript(HERE);
  const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-burst-'));
  const cfgPath = join(dir, 'config.json');
  writeFileSync(cfgPath, JSON.stringify(config));
  const child = spawn(process.execPath, [script, cfgPath], { stdio: ['pipe', 'pipe', 'inherit'] });
  try {
    return await new Promise<BurstAnswer[]>((resolve, reject) => {
      let out = '';
      let sent = false;
      const timer = setTimeout(
        () => reject(new Error(`burst client gave no answer within ${timeoutMs} ms`)),
        timeoutMs,
      );
      child.stdout.setEncoding('utf8');
      child.stdout.on('data', (chunk: string) => {
        out += chunk;
        if (!sent && out.includes('READY\n')) {
          sent = true;
          out = out.slice(out.indexOf('READY\n') + 'READY\n'.length);
          child.stdin.write('go\n');
        }
        const nl = out.indexOf('\n');
        if (sent && nl >= 0) {
          clearTimeout(timer);
          try {
            resolve(JSON.parse(out.slice(0, nl)) as BurstAnswer[]);
          } catch (e) {
            reject(e instanceof Error ? e : new Error(String(e)));
          }
        }
      });
      child.on('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`burst client exited (${code}) before answering`));
      });
    });
  } finally {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

async function childMain(cfgPath: string): Promise<void> {
  const cfg = JSON.parse(readFileSync(cfgPath, 'utf8')) as BurstConfig;
  process.stdout.write('READY\n');
  await new Promise<void>((r) => process.stdin.once('data', () => r()));
  const answers = await Promise.all(
    cfg.commands.map((c) =>
      sendSlashCommand(cfg.url, cfg.signingSecret, c).then(
        (r): BurstAnswer => ({ status: r.status, elapsedMs: r.elapsedMs, json: r.json ?? null }),
        (e: unknown): BurstAnswer => ({
          status: 0,
          elapsedMs: 0,
          json: null,
          error: e instanceof Error ? e.name : String(e),
        }),
      ),
    ),
  );
  process.stdout.write(`${JSON.stringify(answers)}\n`);
  process.exit(0);
}

if (process.argv[1] === HERE) {
  const cfgPath = process.argv[2];
  if (cfgPath === undefined) {
    process.stderr.write('usage: burst-client.ts <config.json>\n');
    process.exit(2);
  }
  void childMain(cfgPath);
}
