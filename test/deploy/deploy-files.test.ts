/**
 * The deployment files keep the architecture's promises: the bot holds the Slack tokens and no SSH
 * key, the worker the reverse; Redis keeps BullMQ's data; the examples pass the app's own checks;
 * the Slack manifest creates what the code registers. No Docker engine is needed: the compose file
 * is parsed, and validated with docker-compose v1 when it is installed.
 */
import { filledExampleInventory, filledExampleInventoryText } from '../harness/example-inventory.ts';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { runConfigCheck } from '../../src/cli/config-check.ts';
import { EnvSchema, parseEnv, settingsFor } from '../../src/config/env.ts';
import { checkConfig } from '../../src/config/check.ts';
import { loadInventoryFile, validateInventory } from '../../src/config/load-inventory.ts';
import { routeFor } from '../../src/config/machines.ts';
import { buildDist } from './build.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const read = (p: string): string => readFileSync(join(ROOT, p), 'utf8');

// ------------------------------------------------------------------ compose model ------------

interface Healthcheck {
  test: string[] | string;
}
interface Service {
  image?: string;
  build?: unknown;
  command?: string[] | string;
  env_file?: string | string[];
  environment?: Record<string, string | null> | string[];
  volumes?: Array<string | { type?: string; source?: string; target?: string; read_only?: boolean }>;
  ports?: unknown[];
  depends_on?: Record<string, { condition?: string }> | string[];
  healthcheck?: Healthcheck;
  user?: string;
}
interface ComposeFile {
  services: Record<string, Service>;
  volumes?: Record<string, unknown>;
}

const compose = parseYaml(read('docker-compose.yml'), { merge: true }) as ComposeFile;
const svc = (name: string): Service => {
  const s = compose.services[name];
  if (!s) throw new Error(`docker-compose.yml has no service "${name}"`);
  return s;
};

interface Mount {
  source: string;
  target: string;
  readOnly: boolean;
}
function mounts(s: Service): Mount[] {
  return (s.volumes ?? []).map((v) => {
    if (typeof v === 'string') {
      const parts = v.split(':');
      // source:target[:mode]; sources may contain ${VAR:-default}, which has a ':' of its own.
      const mode = parts.length >= 3 && /^(ro|rw)(,.*)?$/.test(parts[parts.length - 1] ?? '') ? parts.pop() : undefined;
      const target = parts.pop() ?? '';
      return { source: parts.join(':'), target, readOnly: (mode ?? '').split(',').includes('ro') };
    }
    return { source: v.source ?? '', target: v.target ?? '', readOnly: v.read_only === true };
  });
}
function envMap(s: Service): Record<string, string | null> {
  const e = s.environment ?? {};
  if (!Array.isArray(e)) return e;
  return Object.fromEntries(
    e.map((kv) => {
      const i = kv.indexOf('=');
      return i < 0 ? [kv, null] : [kv.slice(0, i), kv.slice(i + 1)];
    }),
  );
}
const envFiles = (s: Service): string[] =>
  s.env_file === undefined ? [] : Array.isArray(s.env_file) ? s.env_file : [s.env_file];
const commandOf = (s: Service): string[] =>
  Array.isArray(s.command) ? s.command : (s.command ?? '').split(/\s+/).filter(Boolean);
/** `${VAR:-default}` → default (what the container gets when .env leaves VAR unset). */
const interpolateDefault = (v: string): string =>
  v.replace(/\$\{[A-Z0-9_]+(?::?-([^}]*))?\}/g, (_m, d: string | undefined) => d ?? '');

const ENV_KEYS = Object.keys(EnvSchema.shape);
/** Settings only the Slack-facing process reads (src/config/env.ts SETTING_ROWS, `readers`). */
const BOT_ONLY = ENV_KEYS.filter((k) => !(settingsFor('worker') as string[]).includes(k));
const SIGNING_KEYS = '/etc/gpu-medic/keys';
const SSH_DIR = '/etc/gpu-medic/ssh';
const INVENTORY_TARGET = '/etc/gpu-medic/inventory.yaml';

describe('docker-compose.yml', () => {
  it('has redis, bot and worker, the last two from the same image', () => {
    // Services behind a profile (the optional Redis Sentinel set) do not start by default.
    expect(
      Object.entries(compose.services)
        .filter(([, v]) => !(v as { profiles?: unknown }).profiles)
        .map(([k]) => k)
        .sort(),
    ).toEqual(['bot', 'redis', 'worker']);
    expect(svc('bot').build).toBeDefined();
    expect(svc('worker').build).toEqual(svc('bot').build);
    expect(svc('worker').image).toEqual(svc('bot').image);
    expect(commandOf(svc('bot'))).toEqual(['bot']);
    expect(commandOf(svc('worker'))).toEqual(['worker']);
  });

  it("bot and worker run as two different non-root uids, so one role's key files are not the other's to read", () => {
    const uid = (name: string) => /^(\d+)(?::\d+)?$/.exec(svc(name).user ?? '')?.[1];
    expect(uid('bot')).toMatch(/^[1-9]\d*$/);
    expect(uid('worker')).toMatch(/^[1-9]\d*$/);
    expect(uid('bot')).not.toBe(uid('worker'));
  });

  it('redis persists with AOF every second, never evicts (BullMQ needs noeviction) and is health-checked', () => {
    const r = svc('redis');
    expect(r.image).toMatch(/^redis:7/);
    const cmd = commandOf(r).join(' ');
    expect(cmd).toMatch(/--appendonly yes\b/);
    expect(cmd).toMatch(/--appendfsync everysec\b/);
    expect(cmd).toMatch(/--maxmemory-policy noeviction\b/);
    const data = mounts(r).find((m) => m.target === '/data');
    expect(data, 'redis /data must be a named volume').toBeDefined();
    expect(Object.keys(compose.volumes ?? {})).toContain(data?.source);
    expect([r.healthcheck?.test].flat().join(' ')).toContain('redis-cli ping');
    expect(r.ports, 'redis stays on the compose network').toBeUndefined();
  });

  it('bot and worker start only once redis is healthy, and both have a healthcheck', () => {
    for (const name of ['bot', 'worker']) {
      const s = svc(name);
      expect(s.depends_on, name).toEqual({ redis: { condition: 'service_healthy' } });
      expect(s.healthcheck?.test, name).toBeDefined();
    }
  });

  it('the worker mounts the SSH keys read-only; the bot mounts nothing of the kind', () => {
    const key = mounts(svc('worker')).find((m) => m.target === SSH_DIR);
    expect(key).toMatchObject({ readOnly: true });
    for (const m of mounts(svc('bot'))) {
      expect(
        m.target.startsWith(SSH_DIR) || /ssh|\.pem$|id_(rsa|ecdsa|ed25519)/.test(m.source),
        `bot mount ${m.source}:${m.target}`,
      ).toBe(false);
    }
    // Secrets in a bind mount are secrets; nothing else than the inventory and the keys goes in.
    // Each role also mounts its own signing-key directory (docs/security.md), never the other's, so neither
    // can sign as both.
    expect(
      mounts(svc('worker'))
        .map((m) => m.target)
        .sort(),
    ).toEqual([INVENTORY_TARGET, SIGNING_KEYS, SSH_DIR].sort());
    expect(mounts(svc('bot')).map((m) => m.target)).toEqual([INVENTORY_TARGET, SIGNING_KEYS]);
    const keysOf = (n: string) => mounts(svc(n)).find((m) => m.target === SIGNING_KEYS);
    expect(keysOf('bot')).toMatchObject({ readOnly: true, source: expect.stringMatching(/keys\/bot$/) });
    expect(keysOf('worker')).toMatchObject({ readOnly: true, source: expect.stringMatching(/keys\/worker$/) });
  });

  it('both read the same inventory, read-only, and are pointed at it', () => {
    const src = (n: string): Mount | undefined => mounts(svc(n)).find((m) => m.target === INVENTORY_TARGET);
    expect(src('bot')).toMatchObject({ readOnly: true });
    expect(src('worker')).toEqual(src('bot'));
    expect(envMap(svc('bot')).GPU_MEDIC_INVENTORY).toBe(INVENTORY_TARGET);
    expect(envMap(svc('worker')).GPU_MEDIC_INVENTORY).toBe(INVENTORY_TARGET);
  });

  it('the example inventory names keys inside the worker-only mount', () => {
    const inv = parseYaml(read('inventory.example.yaml')) as {
      defaults?: { keyFile?: string };
      hosts?: Array<{ keyFile?: string }>;
      containers?: Array<{ keyFile?: string }>;
    };
    const keyFiles = [
      inv.defaults?.keyFile,
      ...(inv.hosts ?? []).map((h) => h.keyFile),
      ...(inv.containers ?? []).map((c) => c.keyFile),
    ].filter((k): k is string => typeof k === 'string');
    expect(keyFiles.length).toBeGreaterThan(0);
    for (const k of keyFiles) expect(k.startsWith(`${SSH_DIR}/`), k).toBe(true);
  });

  it('the bot environment names no SSH key and the bot publishes no port (socket mode)', () => {
    const bot = svc('bot');
    for (const [k, v] of Object.entries(envMap(bot))) {
      // The worker's signing key is named only to blank it: the bot never gets one, so it cannot forge a plan.
      if (k === 'GPU_MEDIC_WORKER_KEY_FILE') {
        expect(v).toBe('');
        continue;
      }
      expect(/SSH|KEY_?FILE|PRIVATE_KEY/i.test(k), k).toBe(false);
      expect(String(v ?? '').includes(SSH_DIR), k).toBe(false);
    }
    expect(bot.ports).toBeUndefined();
  });

  // The simple setup keeps one .env: the bot reads it whole (env_file); the worker does NOT read it
  // as an env_file, it names each setting it needs and compose fills them in from .env by
  // interpolation. So the Slack tokens in .env never reach the container holding the SSH keys.
  it('the worker gets no env_file and no Slack setting, but every other setting the app reads', () => {
    const worker = svc('worker');
    expect(envFiles(worker)).toEqual([]);
    const keys = Object.keys(envMap(worker));
    expect(keys.filter((k) => k.startsWith('SLACK_'))).toEqual([]);
    expect(BOT_ONLY).toContain('SLACK_BOT_TOKEN');
    expect(keys.sort()).toEqual([...settingsFor('worker')].sort());
    expect(envFiles(svc('bot'))).toEqual(['.env']);
  });

  it("the worker's fallbacks equal the app's own defaults, so an unset .env line means the same thing", () => {
    const env = Object.fromEntries(
      Object.entries(envMap(svc('worker'))).map(([k, v]) => [k, interpolateDefault(v ?? '')]),
    );
    const parsed = parseEnv(env, 'worker');
    expect(parsed.problems).toEqual([]);
    const defaults = EnvSchema.parse({});
    const { REDIS_URL, GPU_MEDIC_INVENTORY, GPU_MEDIC_DEPLOYMENT, ...rest } = parsed.env ?? defaults;
    expect(REDIS_URL).toBe('redis://redis:6379'); // the compose service, not the app's 127.0.0.1
    expect(GPU_MEDIC_INVENTORY).toBe(INVENTORY_TARGET);
    expect(GPU_MEDIC_DEPLOYMENT).toBe('compose'); // so that `config check` says what it assumed
    const { REDIS_URL: _r, GPU_MEDIC_INVENTORY: _i, GPU_MEDIC_DEPLOYMENT: _d, ...restDefaults } = defaults;
    expect(rest).toEqual(restDefaults);
  });
});

// ------------------------------------------------------------------ healthcheck command -------

/** The healthcheck is `[CMD, node, dist/src/main.js, health, <role>]`; run exactly that here, on the build. */
function healthArgv(service: string): string[] {
  const t = svc(service).healthcheck?.test;
  if (!Array.isArray(t) || t[0] !== 'CMD' || t[1] !== 'node')
    throw new Error(`${service}: healthcheck is not [CMD, node, ...]`);
  return t.slice(2);
}
async function runHealth(service: string, env: Record<string, string>): Promise<{ code: number; out: string }> {
  try {
    // The image's WORKDIR holds src/: run from the repository root the same way.
    const r = await run(process.execPath, healthArgv(service), {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', ...env },
      timeout: 20_000,
    });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === 'number' ? err.code : -1, out: (err.stdout ?? '') + (err.stderr ?? '') };
  }
}

describe('bot and worker healthcheck command (reads the heartbeat the process writes)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gpu-medic-health-'));
    await buildDist();
  }, 300_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const beat = (file: string, o: { ageMs?: number; checks?: Record<string, string | null>; role?: string } = {}) =>
    writeFileSync(
      file,
      JSON.stringify({
        role: o.role ?? 'worker',
        pid: 4242,
        at: new Date(Date.now() - (o.ageMs ?? 0)).toISOString(),
        intervalMs: 10_000,
        checks: o.checks ?? { redis: null, queues: null },
      }),
    );

  it("is `gpu-medic health <role>` for each service, through the image entrypoint's compiled main", () => {
    expect(healthArgv('bot')).toEqual(['dist/src/main.js', 'health', 'bot']);
    expect(healthArgv('worker')).toEqual(['dist/src/main.js', 'health', 'worker']);
  });

  it('no heartbeat, a fresh healthy one, a failing check, a stale one: exit 1, 0, 1, 1 with the reason', async () => {
    const file = join(dir, 'worker.json');
    const env = { GPU_MEDIC_HEALTH_FILE: file };
    const none = await runHealth('worker', env);
    expect(none.code).toBe(1);
    expect(none.out).toContain(`no heartbeat at ${file}`);
    beat(file, { ageMs: 2000 });
    const ok = await runHealth('worker', env);
    expect(ok.code).toBe(0);
    // The age grows while the command starts (a second or more on a busy machine).
    expect(ok.out).toMatch(/^worker \(pid 4242\) ok \(([2-9]|\d\d) s ago\): redis, queues\n$/);
    beat(file, { checks: { redis: 'no answer within 2000 ms', queues: null } });
    const bad = await runHealth('worker', env);
    expect(bad.code).toBe(1);
    expect(bad.out).toMatch(/unhealthy \(\d+ s ago\): redis: no answer within 2000 ms\n$/);
    beat(file, { ageMs: 40_000 });
    const stale = await runHealth('worker', env);
    expect(stale.code).toBe(1);
    expect(stale.out).toMatch(
      /^worker \(pid 4242\) stale: last heartbeat (4\d|[5-9]\d) s ago, expected every 10 s \(hung or dead\)\n$/,
    );
  });
});

// ------------------------------------------------------------------ Dockerfile -----------------

describe('Dockerfile and .dockerignore', () => {
  const lines = read('Dockerfile')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const instr = (name: string): string[] => lines.filter((l) => l.toUpperCase().startsWith(`${name} `));

  /** The stages: `FROM ... AS build` compiles, the last FROM is what runs. */
  const stages = (): string[][] => {
    const out: string[][] = [];
    for (const l of lines) {
      if (l.toUpperCase().startsWith('FROM ')) out.push([]);
      out[out.length - 1]?.push(l);
    }
    return out;
  };

  it('a build stage compiles with tsc (npm run build); the runtime stage takes only dist/ and production deps', () => {
    const [build, runtime, ...more] = stages();
    expect(more).toEqual([]);
    expect(build?.[0]).toBe('FROM node:20-slim AS build');
    expect(build?.join('\n')).toMatch(/^RUN npm run -s build$/m);
    expect(runtime?.[0]).toBe('FROM node:20-slim');
    const rt = (runtime ?? []).join('\n');
    expect(rt).toMatch(/npm install --omit=dev/);
    const copied = (runtime ?? []).filter((l) => l.startsWith('COPY '));
    expect(copied).toEqual(['COPY package.json package-lock.json ./', 'COPY --from=build /app/dist/ ./dist/']);
    const pkg = JSON.parse(read('package.json')) as {
      scripts: Record<string, string>;
      dependencies: Record<string, string>;
      devDependencies: Record<string, string>;
    };
    // tsc, then main.js made executable: it is package.json's bin, the `gpu-medic` command.
    expect(pkg.scripts.build).toBe('tsc -p tsconfig.build.json && chmod +x dist/src/main.js');
    // No TypeScript loader or compiler among what production installs.
    for (const dev of ['tsx', 'typescript']) {
      expect(pkg.dependencies[dev], dev).toBeUndefined();
      expect(pkg.devDependencies[dev], dev).toBeDefined();
    }
  });

  it('runs as a non-root user, node dist/src/main.js, start by default; npm start/bot/worker run the same file', () => {
    const users = instr('USER');
    expect(users.length).toBeGreaterThan(0);
    expect(users[users.length - 1]).not.toMatch(/^USER (root|0)(:|$)/);
    expect(instr('ENTRYPOINT')).toEqual(['ENTRYPOINT ["node", "dist/src/main.js"]']);
    expect(instr('CMD')).toEqual(['CMD ["start"]']);
    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
    for (const role of ['start', 'bot', 'worker']) {
      expect(pkg.scripts[role], role).toBe(`node dist/src/main.js ${role}`);
      expect(pkg.scripts[`pre${role}`], `pre${role}`).toBe('npm run -s build');
    }
  });

  it('keeps secrets and local state out of the build context', () => {
    const ignored = read('.dockerignore')
      .split('\n')
      .map((l) => l.trim());
    for (const p of ['.env', 'ssh/', 'inventory.yaml', 'node_modules/', '.git/']) expect(ignored, p).toContain(p);
  });
});

// ------------------------------------------------------------------ .env.example --------------

describe('.env.example', () => {
  const text = read('.env.example');
  const lines = text.split('\n');
  /** KEY -> { value, commented, line index } for `KEY=v` and `# KEY=v` lines. */
  const entries = new Map<string, { value: string; commented: boolean; at: number }>();
  lines.forEach((l, at) => {
    const m = /^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$/.exec(l);
    if (m?.[2]) entries.set(m[2], { value: m[3] ?? '', commented: Boolean(m[1]), at });
  });

  it('lists every setting the app reads, and nothing it does not', () => {
    expect([...entries.keys()].sort()).toEqual([...ENV_KEYS].sort());
  });

  it('explains every setting in a comment just above it', () => {
    for (const [k, e] of entries) {
      const above = lines[e.at - 1] ?? '';
      expect(above.startsWith('#') && !/^#\s*[A-Z][A-Z0-9_]*=/.test(above), `comment above ${k}`).toBe(true);
    }
  });

  it('holds no token, secret or real-looking credential', () => {
    for (const k of ['SLACK_BOT_TOKEN', 'SLACK_APP_TOKEN', 'SLACK_SIGNING_SECRET'])
      expect(entries.get(k)?.value ?? '', k).toBe('');
    expect(text).not.toMatch(/xox[abposr]-[A-Za-z0-9]|xapp-\d|-----BEGIN/);
  });

  it('as shipped, config check refuses it until the two Slack tokens are filled in, and then accepts it', () => {
    const active = Object.fromEntries([...entries].filter(([, e]) => !e.commented).map(([k, e]) => [k, e.value]));
    expect(
      parseEnv(active, 'bot')
        .problems.map((p) => p.variable)
        .sort(),
    ).toEqual(['SLACK_APP_TOKEN', 'SLACK_BOT_TOKEN']);
    expect(parseEnv({ ...active, SLACK_BOT_TOKEN: 'xoxb-test', SLACK_APP_TOKEN: 'xapp-test' }, 'bot').problems).toEqual(
      [],
    );
  });

  it('with the tokens filled in and the example inventory, it passes config check for a plain host (a local Redis) and for compose', async () => {
    const active = Object.fromEntries([...entries].filter(([, e]) => !e.commented).map(([k, e]) => [k, e.value]));
    const filled = {
      ...active,
      SLACK_BOT_TOKEN: 'xoxb-test',
      SLACK_APP_TOKEN: 'xapp-test',
      GPU_MEDIC_INVENTORY: filledExampleInventory(),
    };
    const local = await checkConfig(filled, 'start', loadInventoryFile);
    expect(local.problems).toEqual([]);
    expect(local.deployment).toBe('local');
    expect(local.env?.REDIS_URL).toBe('redis://127.0.0.1:6379');
    // Under compose, the compose file adds its own REDIS_URL and GPU_MEDIC_DEPLOYMENT.
    const composeEnv = envMap(svc('bot'));
    const inCompose = await checkConfig(
      {
        ...filled,
        GPU_MEDIC_DEPLOYMENT: String(composeEnv.GPU_MEDIC_DEPLOYMENT),
        REDIS_URL: interpolateDefault(String(composeEnv.REDIS_URL)),
      },
      'start',
      loadInventoryFile,
    );
    expect(inCompose.problems).toEqual([]);
    expect(inCompose.deployment).toBe('compose');
  });

  it('commented-out examples are valid values, and those with a default show the default', () => {
    const defaults = EnvSchema.parse({}) as Record<string, unknown>;
    for (const [k, e] of entries) {
      if (!e.commented || e.value === '') continue; // blank secret placeholders: see the test above
      const r = EnvSchema.safeParse({ [k]: e.value });
      expect(r.success, `${k}=${e.value}`).toBe(true);
      const d = defaults[k];
      if (d !== undefined && !Array.isArray(d) && r.success)
        expect((r.data as Record<string, unknown>)[k], k).toEqual(d);
    }
  });
});

// ------------------------------------------------------------------ inventory.example.yaml ----

describe('inventory.example.yaml', () => {
  const doc: unknown = parseYaml(read('inventory.example.yaml'));

  it('as shipped, only its placeholder fingerprints are refused, each named by its machine', () => {
    expect(validateInventory(doc).problems.map((p) => `${p.at}: ${p.message}`)).toEqual([
      expect.stringMatching(/^host kpro5: hostKeys.*placeholder from inventory\.example\.yaml/),
      expect.stringMatching(/^container ct131: hostKeys.*placeholder from inventory\.example\.yaml/),
    ]);
  });

  it('with its placeholders filled in, passes validateInventory: kpro5 with ct129 through pct exec and ct131 at its own address', () => {
    const r = validateInventory(parseYaml(filledExampleInventoryText()));
    expect(r.problems).toEqual([]);
    const inv = r.inventory;
    if (!inv) throw new Error('no inventory');
    expect(inv.hosts.map((h) => h.id)).toEqual(['kpro5']);
    expect(routeFor(inv, 'ct129')).toMatchObject({ kind: 'pct', vmid: 129, host: { machineId: 'kpro5' } });
    expect(routeFor(inv, 'ct131')).toMatchObject({ kind: 'direct', endpoint: { machineId: 'ct131' } });
  });

  it('with its placeholders filled in, passes `config check worker` when GPU_MEDIC_INVENTORY points at it', async () => {
    let out = '';
    const sink = new Writable({ write: (c: Buffer, _e, cb) => ((out += c.toString()), cb()) });
    const code = await runConfigCheck(['worker'], { GPU_MEDIC_INVENTORY: filledExampleInventory() }, sink);
    expect(out).toContain('ok. 3 machines (1 hosts, 2 containers)');
    expect(code).toBe(0);
  });
});

// ------------------------------------------------------------------ Slack manifest ------------

describe('slack/manifest.yaml', () => {
  const raw = read('slack/manifest.yaml');
  const m = parseYaml(raw) as {
    display_information: { name: string; description?: string; long_description?: string };
    features: {
      app_home?: { home_tab_enabled?: boolean; messages_tab_enabled?: boolean };
      bot_user?: { display_name: string };
      slash_commands: Array<{ command: string; description: string; usage_hint?: string; url?: string }>;
    };
    oauth_config: { scopes: { bot: string[]; user?: string[] } };
    settings: {
      interactivity?: { is_enabled: boolean; request_url?: string };
      socket_mode_enabled?: boolean;
      event_subscriptions?: { request_url?: string; bot_events?: string[] };
    };
  };

  it('creates /gpu, the command the bot registers, with a usage hint', () => {
    const gpu = m.features.slash_commands.find((c) => c.command === '/gpu');
    expect(gpu?.description).toBeTruthy();
    expect(gpu?.usage_hint).toMatch(/status/);
    expect(gpu?.usage_hint).toMatch(/unstick/);
    expect(read('commands/index.ts')).toContain("app.command('/gpu'");
  });

  it('socket mode with interactivity on (approval buttons), and no URLs that socket mode would not use', () => {
    expect(m.settings.socket_mode_enabled).toBe(true);
    expect(m.settings.interactivity?.is_enabled).toBe(true);
    expect(m.settings.interactivity?.request_url).toBeUndefined();
    for (const c of m.features.slash_commands) expect(c.url).toBeUndefined();
    expect(m.settings.event_subscriptions?.request_url).toBeUndefined();
  });

  it('turns on the Home tab and subscribes to exactly the event the bot listens to (app_home_opened)', () => {
    expect(m.features.app_home?.home_tab_enabled).toBe(true);
    expect(m.settings.event_subscriptions?.bot_events).toEqual(['app_home_opened']);
    expect(read('src/slack/home.ts')).toContain("app.event('app_home_opened'");
  });

  it('asks for exactly the bot scopes the code uses, each justified in a comment, and no user scopes', () => {
    expect([...m.oauth_config.scopes.bot].sort()).toEqual([
      'channels:history',
      'chat:write',
      'chat:write.public',
      'commands',
      'groups:history',
    ]);
    expect(m.oauth_config.scopes.user).toBeUndefined();
    const lines = raw.split('\n');
    for (const s of m.oauth_config.scopes.bot) {
      const at = lines.findIndex((l) => l.trim() === `- ${s}`);
      expect(lines[at - 1]?.trim().startsWith('#'), `comment above scope ${s}`).toBe(true);
    }
  });

  // Limits from Slack's published manifest JSON schema (github.com/slackapi/manifest-schema, v1).
  it("fits the manifest schema's limits", () => {
    expect(m.display_information.name.length).toBeLessThanOrEqual(35);
    expect((m.display_information.description ?? '').length).toBeLessThanOrEqual(140);
    if (m.display_information.long_description !== undefined)
      expect(m.display_information.long_description.length).toBeGreaterThanOrEqual(175);
    expect(m.features.bot_user?.display_name.length ?? 0).toBeGreaterThan(0);
    for (const c of m.features.slash_commands) {
      expect(c.command).toMatch(/^\/.{1,31}$/);
      expect(c.description.length).toBeLessThanOrEqual(2000);
      expect((c.usage_hint ?? '').length).toBeLessThanOrEqual(1000);
    }
  });
});

// ------------------------------------------------------------------ docker-compose v1 ----------

const COMPOSE_BIN = '/usr/bin/docker-compose';
const hasCompose = existsSync(COMPOSE_BIN);
if (!hasCompose)
  console.warn(
    `deploy-files: ${COMPOSE_BIN} not found, skipping the docker-compose config checks (run \`docker compose config -q\` by hand)`,
  );

describe.skipIf(!hasCompose)(
  `docker-compose config (${hasCompose ? COMPOSE_BIN : `skipped: ${COMPOSE_BIN} not installed`})`,
  () => {
    let dir: string;
    beforeAll(() => {
      // A scratch project: the compose file plus a .env, as an operator would have it.
      dir = mkdtempSync(join(tmpdir(), 'gpu-medic-compose-'));
      copyFileSync(join(ROOT, 'docker-compose.yml'), join(dir, 'docker-compose.yml'));
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    // Only PATH/HOME: a REDIS_URL or SLACK_* in the test runner's environment would override .env.
    const compose = (...args: string[]) =>
      run(COMPOSE_BIN, ['-f', 'docker-compose.yml', ...args], {
        cwd: dir,
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir },
        timeout: 30_000,
      });

    it('validates (config -q) with the .env.example copied to .env', async () => {
      copyFileSync(join(ROOT, '.env.example'), join(dir, '.env'));
      await expect(compose('config', '-q')).resolves.toBeDefined();
    });

    it('as compose resolves it, the Slack tokens in .env reach the bot and never the worker', async () => {
      const bot = 'xoxb-not-a-real-token-for-the-test';
      const app = 'xapp-not-a-real-token-for-the-test';
      const workerSecret = 'w0rker-secret-not-real-0123456789abcdef0123456789';
      writeFileSync(
        join(dir, '.env'),
        `${read('.env.example')}\nSLACK_BOT_TOKEN=${bot}\nSLACK_APP_TOKEN=${app}\nSLACK_SIGNING_SECRET=not-a-real-secret\nGPU_MEDIC_SITES=lab\nGPU_MEDIC_WORKER_SECRET=${workerSecret}\n`,
      );
      const { stdout } = await compose('config');
      const resolved = parseYaml(stdout) as ComposeFile;
      const botEnv = envMap(resolved.services.bot ?? {});
      const worker = resolved.services.worker ?? {};
      expect(botEnv.SLACK_BOT_TOKEN).toBe(bot);
      expect(botEnv.SLACK_APP_TOKEN).toBe(app);
      expect(Object.keys(envMap(worker)).filter((k) => k.startsWith('SLACK_'))).toEqual([]);
      const workerText = JSON.stringify(worker);
      for (const secret of [bot, app, 'not-a-real-secret']) expect(workerText).not.toContain(secret);
      expect(envMap(worker).GPU_MEDIC_SITES).toBe('lab'); // the worker still gets its settings from .env
      // The reverse: the worker's secret in the same .env reaches the worker and never the bot.
      expect(envMap(worker).GPU_MEDIC_WORKER_SECRET).toBe(workerSecret);
      expect(botEnv.GPU_MEDIC_WORKER_SECRET).toBe('');
      expect(JSON.stringify(resolved.services.bot)).not.toContain(workerSecret);
      expect(
        parseEnv(Object.fromEntries(Object.entries(botEnv).map(([k, v]) => [k, v ?? ''])), 'bot').problems,
      ).toEqual([]);
    });
  },
);

// ------------------------------------------------------------------ docs/deploy.md -------------

describe('docs/deploy.md', () => {
  const doc = read('docs/deploy.md');
  it('shows the same inventory as inventory.example.yaml (so the docs never drift from a file that passes the check)', () => {
    const blocks = [...doc.matchAll(/```yaml\n([\s\S]*?)```/g)].map((b) => b[1] ?? '');
    const inventoryBlock = blocks.find((b) => /^defaults:/m.test(b) && /^hosts:/m.test(b));
    expect(inventoryBlock, 'a ```yaml block with the example inventory').toBeDefined();
    expect(parseYaml(inventoryBlock ?? '')).toEqual(parseYaml(read('inventory.example.yaml')));
  });
  it('tells how to get fingerprints and how the secrets are split', () => {
    expect(doc).toContain('ssh-keyscan');
    expect(doc).toContain('ssh-keygen -lf -');
    expect(doc).toMatch(/secrets split/i);
  });
});

// ------------------------------------------------------------------ README's two commands ------

describe("README's two commands", () => {
  const readme = read('README.md');
  const section = readme.slice(
    readme.indexOf('## Two commands'),
    readme.indexOf('\n## ', readme.indexOf('## Two commands') + 1),
  );
  const commands = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => (m[1] ?? '').trim());

  it('are the setup script then the demo, and .ci/run', () => {
    expect(commands).toEqual(['bash scripts/setup.sh && npm run demo', 'bash .ci/run']);
    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
    expect(pkg.scripts.demo).toBeDefined();
  });

  it('.ci/run uses the same setup script and runs the test command the README names', () => {
    const ci = read('.ci/run')
      .split('\n')
      .filter((l) => !l.trim().startsWith('#'));
    expect(ci).toContain('bash scripts/setup.sh --ci');
    expect(ci.some((l) => /^npm test\b/.test(l.trim()))).toBe(true);
    expect(section).toContain('`npm test`');
  });

  it('the setup script installs what the fleet, the demo and the tests need, and starts a local Redis', () => {
    const setup = read('scripts/setup.sh');
    for (const pkg of ['openssh-server', 'psmisc', 'gcc', 'util-linux', 'redis-server', 'nodejs'])
      expect(setup, pkg).toContain(pkg);
    expect(setup).toMatch(/redis-server --daemonize yes --bind 127\.0\.0\.1 --port 6379/);
    expect(setup).toContain('npm install');
  });
});
