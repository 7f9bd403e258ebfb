/**
 * The layout holds: every folder of the code imports only folders on lower floors (the FLOORS table, also
 * shown in docs/architecture.md and followed by the README's map), nothing imports in a cycle, and the
 * pure core imports no I/O. Imports are read as text: `import`, `import type`, `export … from` and
 * `import()` all count, since a type import pulls a folder's words in just as much as a value does.
 */
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * The floors, lowest first, written by hand in the order of the layers (never derived from the import
 * graph): a room may import only rooms on a floor below its own, never one on its floor or above. A room
 * is a folder with everything under it (`src/gpu` holds `src/gpu/parse/`), or one of the files at the top
 * of src/.
 */
const FLOORS: ReadonlyArray<{ floor: string; rooms: readonly string[] }> = [
  { floor: 'ground: what every file may throw and log', rooms: ['src/errors.ts', 'src/logger.ts'] },
  { floor: 'words: pure formatting, no domain types, no I/O', rooms: ['src/text'] },
  {
    floor: 'primitives that know no GPU: keys and envelopes, HTTP, Redis, job schemas, the heartbeat',
    rooms: ['src/auth', 'src/http', 'src/redis', 'src/queue', 'src/health'],
  },
  { floor: 'machine facts: parsing and diagnosis (pure)', rooms: ['src/gpu'] },
  { floor: 'what may run on a host: the grammar and its templates (pure)', rooms: ['src/agent-grammar'] },
  {
    floor: 'judgement and plans (pure), and the SSH executor that runs templates',
    rooms: ['src/watchdog', 'src/plan', 'src/ssh'],
  },
  {
    floor: 'policy and settings: who may approve, the step guard, env and inventory',
    rooms: ['src/approval', 'src/step-guard', 'src/config'],
  },
  { floor: 'the doctor', rooms: ['src/doctor'] },
  { floor: 'the incident log: events and their stores', rooms: ['src/incident'] },
  { floor: 'reading machines, and rendering the log', rooms: ['src/readings', 'src/render'] },
  { floor: 'the step runner and the watchdog store', rooms: ['src/unstick-runner', 'src/watch-store'] },
  {
    floor: 'the edges: Slack, Alertmanager, the command line, slash commands',
    rooms: ['src/slack', 'src/alertmanager', 'src/cli', 'commands'],
  },
  { floor: 'metrics', rooms: ['src/metrics'] },
  { floor: 'job processors', rooms: ['workers'] },
  { floor: 'the two processes', rooms: ['src/bot.ts', 'src/worker-process.ts'] },
  { floor: 'what starts them: the entry point and the bench', rooms: ['src/main.ts', 'bench'] },
];

const FLOOR_OF = new Map(FLOORS.flatMap(({ rooms }, i) => rooms.map((r) => [r, i] as const)));

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const f of readdirSync(join(ROOT, dir))) {
    const p = join(dir, f);
    if (statSync(join(ROOT, p)).isDirectory()) out.push(...tsFiles(p));
    else if (p.endsWith('.ts')) out.push(p);
  }
  return out;
}

/** Every module a file names: static and type imports, side-effect imports, `export … from`, `import()`. */
function importsOf(file: string): string[] {
  const src = readFileSync(join(ROOT, file), 'utf8');
  const stat = /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+'([^']+)'/g;
  const bare = /(?:^|\n)\s*import\s+'([^']+)'/g;
  const dynamic = /\bimport\(\s*'([^']+)'\s*\)/g;
  return [...src.matchAll(stat), ...src.matchAll(bare), ...src.matchAll(dynamic)].map((m) => m[1] ?? '');
}

function localDeps(file: string): string[] {
  return importsOf(file)
    .filter((s) => s.startsWith('.'))
    .map((s) => relative(ROOT, resolve(ROOT, dirname(file), s)));
}

/** The room a file is in: `src/gpu/parse/x.ts` → `src/gpu`, `src/bot.ts` → itself, `workers/unstick/x.ts` → `workers`. */
function roomOf(file: string): string | undefined {
  const parts = file.split('/');
  if (parts[0] === 'src') return parts.length > 2 ? `src/${parts[1]}` : file;
  if (['workers', 'commands', 'bench'].includes(parts[0] ?? '')) return parts[0];
  return undefined;
}

const FILES = ['src', 'commands', 'workers'].flatMap(tsFiles);
const FLOORED = [...FILES, ...tsFiles('bench')];

describe('architecture', () => {
  it('has a floor for every room of src/, workers/, commands/ and bench/, and names no room that is gone', () => {
    const rooms = [...new Set(FLOORED.map(roomOf))];
    expect(rooms.length).toBeGreaterThan(20);
    expect(rooms.filter((r) => r === undefined || !FLOOR_OF.has(r))).toEqual([]);
    expect([...FLOOR_OF.keys()].filter((r) => !existsSync(join(ROOT, r)))).toEqual([]);
    expect(FLOOR_OF.size).toBe(FLOORS.flatMap((f) => f.rooms).length);
  });

  it('is the table docs/architecture.md shows (top floor first there), room for room', () => {
    const doc = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8');
    const shown = [...doc.matchAll(/^\| (\d+) +\| (`[^|]+`) +\| ([^|]+?) +\|$/gm)].map((m) => ({
      floor: Number(m[1]),
      rooms: [...(m[2] ?? '').matchAll(/`([^`]+)`/g)].map((r) => (r[1] ?? '').replace(/\/$/, '')),
      what: m[3],
    }));
    const table = FLOORS.map(({ floor, rooms }, i) => ({ floor: i + 1, rooms: [...rooms], what: floor })).reverse();
    expect(shown).toEqual(table);
  });

  it("gives each folder of the README's map the floor of its room", () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const map = [...readme.matchAll(/^\| `([^`]+)\/` +\| ([\d, ]+?) +\|/gm)];
    expect(map.length).toBeGreaterThan(20);
    const floorsOf = (folder: string): string => {
      if (folder === 'src') {
        const top = [...FLOOR_OF].filter(([r]) => /^src\/[^/]+\.ts$/.test(r)).map(([, i]) => i + 1);
        return [...new Set(top)].sort((a, b) => b - a).join(', ');
      }
      return String((FLOOR_OF.get(roomOf(`${folder}/x.ts`) ?? '') ?? -2) + 1);
    };
    expect(map.map((m) => `${m[1]}: ${m[2]}`)).toEqual(map.map((m) => `${m[1]}: ${floorsOf(m[1] ?? '')}`));
  });

  it('imports only downward: every room imports only rooms on lower floors (type imports included)', () => {
    const up: string[] = [];
    for (const f of FLOORED) {
      const from = roomOf(f) ?? '';
      for (const dep of localDeps(f)) {
        const to = roomOf(dep);
        if (to === undefined || to === from) continue;
        const a = FLOOR_OF.get(from) ?? -1;
        const b = FLOOR_OF.get(to) ?? Number.POSITIVE_INFINITY;
        if (b >= a) up.push(`${f} (floor ${a + 1}) imports ${dep} (floor ${b + 1})`);
      }
    }
    expect(FLOORED.length).toBeGreaterThan(100);
    expect(up).toEqual([]);
  });

  it('keeps the code apart from the tests: src/, workers/ and commands/ import nothing from test/ or bench/', () => {
    const offenders = FILES.flatMap((f) =>
      localDeps(f)
        .filter((d) => d.startsWith('test/') || d.startsWith('bench/'))
        .map((d) => `${f} imports ${d}`),
    );
    expect(offenders).toEqual([]);
  });

  it('has no import cycles in src/, commands/ and workers/', () => {
    const state = new Map<string, 1 | 2>();
    const cycles: string[] = [];
    const visit = (f: string, stack: string[]): void => {
      state.set(f, 1);
      stack.push(f);
      for (const d of localDeps(f)) {
        if (state.get(d) === 1) cycles.push([...stack.slice(stack.indexOf(d)), d].join(' -> '));
        else if (!state.has(d)) visit(d, stack);
      }
      stack.pop();
      state.set(f, 2);
    };
    for (const f of FILES) if (!state.has(f)) visit(f, []);
    expect(FILES.length).toBeGreaterThan(50);
    expect(cycles).toEqual([]);
  });

  /** The pure core, by folder (with the files of it that are not pure) and by file. */
  const PURE_FOLDERS: ReadonlyArray<{ folder: string; except?: readonly string[] }> = [
    { folder: 'src/text/' },
    { folder: 'src/gpu/' },
    // generate.ts writes agent/grammar.json.
    { folder: 'src/agent-grammar/', except: ['src/agent-grammar/generate.ts'] },
    { folder: 'src/plan/' },
    { folder: 'src/render/' },
    { folder: 'src/watchdog/' },
    { folder: 'src/doctor/' },
  ];
  const PURE_FILES = [
    'src/approval/approval-policy.ts',
    'src/approval/policy.ts',
    'src/incident/timeline.ts',
    'src/incident/incident-summary.ts',
    'src/health/report.ts',
    'src/slack/card-plans.ts',
    'src/cli/snapshot-text.ts',
  ];
  const IO_MODULES = [
    'src/ssh/executor.ts',
    'src/ssh/connection-pool.ts',
    'src/ssh/channel-run.ts',
    'src/incident/log.ts',
    'src/incident/target-lock.ts',
    'src/approval/approval-store.ts',
    'src/step-guard/',
    'src/readings/',
    'src/unstick-runner/',
    'src/queue/',
    'src/http/',
    'src/bot.ts',
    'src/worker-process.ts',
    'src/slack/app.ts',
    'src/slack/outbox.ts',
    'src/slack/poster.ts',
    'src/slack/replay-guard.ts',
  ];

  it('names only files and folders that exist in its pure-core and I/O lists', () => {
    const named = [
      ...PURE_FOLDERS.flatMap(({ folder, except }) => [folder, ...(except ?? [])]),
      ...PURE_FILES,
      ...IO_MODULES,
    ];
    expect(named.filter((p) => !existsSync(join(ROOT, p)))).toEqual([]);
  });

  it('keeps the pure core free of I/O: parse, diagnose, plan, policy and render import no I/O module', () => {
    const pure = FILES.filter(
      (f) =>
        PURE_FOLDERS.some(({ folder, except }) => f.startsWith(folder) && !(except ?? []).includes(f)) ||
        PURE_FILES.includes(f),
    );
    expect(pure.length).toBeGreaterThan(60);
    const io =
      /^(ioredis|bullmq|ssh2|pino|node:(fs|net|http|https|child_process|dgram|tls)|fs|net|http|child_process)(\/|$)/;
    const offenders: string[] = [];
    for (const f of pure) {
      for (const s of importsOf(f)) {
        // Type-only imports of Slack block types are fine; runtime imports of I/O are not.
        if (io.test(s)) offenders.push(`${f} imports ${s}`);
        const dep = s.startsWith('.') ? relative(ROOT, resolve(ROOT, dirname(f), s)) : '';
        if (IO_MODULES.some((m) => dep === m || (m.endsWith('/') && dep.startsWith(m))))
          offenders.push(`${f} imports ${s}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});
