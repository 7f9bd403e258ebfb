#!/usr/bin/env node
/**
 * Entry point: `bot`, `worker`, `start` (both in one process), `config check`, `parse`.
 * Each subcommand is loaded lazily so that `parse` never loads Slack or SSH code.
 */
const [sub, ...rest] = process.argv.slice(2);

async function main(): Promise<number> {
  switch (sub) {
    case 'parse': {
      const { runParseCommand } = await import('./cli/parse-command.ts');
      return runParseCommand(rest, { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr });
    }
    default:
      process.stderr.write(`usage: gpu-medic <bot|worker|start|config check|parse> ...\n`);
      return 2;
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`gpu-medic: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
