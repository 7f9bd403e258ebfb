/**
 * Real Prometheus and real Alertmanager (Debian's `prometheus` and `prometheus-alertmanager`, which
 * scripts/setup.sh --ci installs) on free loopback ports, offline, each in a temporary directory,
 * and a small exporter serving DCGM field names with values the test sets.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** An exporter of `name{labels} value` lines; `set` changes what the next scrape reads. */
export interface TestExporter {
  port: number;
  set(name: string, labels: Record<string, string>, value: number): void;
  close(): Promise<void>;
}

export async function startExporter(): Promise<TestExporter> {
  const series = new Map<string, { name: string; labels: string; value: number }>();
  const server: Server = createServer((req, res) => {
    const byName = new Map<string, string[]>();
    for (const s of series.values())
      byName.set(s.name, [...(byName.get(s.name) ?? []), `${s.name}{${s.labels}} ${s.value}`]);
    const body = [...byName.entries()].map(([n, lines]) => `# TYPE ${n} gauge\n${lines.join('\n')}\n`).join('');
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(body);
    req.resume();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    set(name, labels, value) {
      const l = Object.entries(labels)
        .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
        .join(',');
      series.set(`${name}{${l}}`, { name, labels: l, value });
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

export interface Daemon {
  port: number;
  url: string;
  output(): string;
  stop(): Promise<void>;
}

async function startDaemon(
  bin: string,
  args: (port: number, dir: string) => string[],
  files: (port: number, dir: string) => Record<string, string>,
): Promise<Daemon> {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-medic-mon-'));
  const port = await freePort();
  for (const [name, text] of Object.entries(files(port, dir))) writeFileSync(join(dir, name), text, { mode: 0o600 });
  let out = '';
  const child: ChildProcess = spawn(bin, args(port, dir), { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${bin} exited: ${out}`);
    const ok = await fetch(`${url}/-/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) throw new Error(`${bin} not ready in 30 s: ${out}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    port,
    url,
    output: () => out,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Alertmanager with `config` (YAML text) as its configuration; no cluster, no network but loopback. */
export function startAlertmanager(config: string, files: Record<string, string> = {}): Promise<Daemon> {
  return startDaemon(
    '/usr/bin/prometheus-alertmanager',
    (port, dir) => [
      `--config.file=${join(dir, 'alertmanager.yml')}`,
      `--storage.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--cluster.listen-address=',
      '--log.level=debug',
    ],
    () => ({ 'alertmanager.yml': config, ...files }),
  );
}

/** Prometheus evaluating `rules` every second over `scrapePort`'s /metrics, alerting `alertmanagerPort`. */
export function startPrometheus(o: { rules: string; scrapePort: number; alertmanagerPort: number }): Promise<Daemon> {
  return startDaemon(
    '/usr/bin/prometheus',
    (port, dir) => [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--rules.alert.resend-delay=1s',
      `--web.external-url=http://127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    () => ({
      'rules.yml': o.rules,
      'prometheus.yml': [
        'global: { scrape_interval: 1s, evaluation_interval: 1s }',
        'rule_files: [rules.yml]',
        `alerting: { alertmanagers: [ { static_configs: [ { targets: ['127.0.0.1:${o.alertmanagerPort}'] } ] } ] }`,
        `scrape_configs: [ { job_name: dcgm, static_configs: [ { targets: ['127.0.0.1:${o.scrapePort}'] } ] } ]`,
        '',
      ].join('\n'),
    }),
  );
}
