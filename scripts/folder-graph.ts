/**
 * Prints the folder-level import graph of the code (src/ by top folder, workers/, commands/, bench/): the pairs
 * of folders that import each other, the floors the folders need, and the arrows that must run up. Run by hand
 * (`npx tsx scripts/folder-graph.ts [--src]`) to put figures in a review; test/unit/architecture.test.ts is what holds
 * the floors.
 *
 * Floors: folders are ordered so the fewest folder-to-folder arrows run against the order (exact, per knot of
 * folders that reach each other); a folder's floor is one above the highest floor it imports with the order.
 * Arrows up are the folder-to-folder arrows that run against it. Type imports and `export … from` count.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const TOPS = ['src', 'workers', 'commands', 'bench'];

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const f of readdirSync(join(ROOT, dir))) {
    const p = join(dir, f);
    if (statSync(join(ROOT, p)).isDirectory()) out.push(...tsFiles(p));
    else if (p.endsWith('.ts')) out.push(p);
  }
  return out;
}

/**
 * src/gpu/parse/x.ts → src/gpu; workers/unstick/x.ts → workers. The files at the top of src/ stand alone (the
 * processes sit on top of everything, errors.ts and logger.ts under it). `--src` leaves out all but src/'s folders.
 */
const SRC_ONLY = process.argv.includes('--src');
function folderOf(file: string): string | undefined {
  const parts = file.split('/');
  if (!TOPS.includes(parts[0] ?? '')) return undefined;
  if (parts[0] === 'src') return parts.length > 2 ? `src/${parts[1]}` : SRC_ONLY ? undefined : file;
  return SRC_ONLY ? undefined : parts[0];
}

const SPEC = /(?:(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+|import\()\s*'([^']+)'/g;
const edges = new Map<string, Set<string>>();
const files = TOPS.flatMap(tsFiles);
for (const f of files) {
  const from = folderOf(f);
  if (from === undefined) continue;
  if (!edges.has(from)) edges.set(from, new Set());
  for (const m of readFileSync(join(ROOT, f), 'utf8').matchAll(SPEC)) {
    const s = m[1] ?? '';
    if (!s.startsWith('.')) continue;
    const to = folderOf(relative(ROOT, resolve(ROOT, dirname(f), s)));
    if (to !== undefined && to !== from) edges.get(from)?.add(to);
  }
}
const nodes = [...edges.keys()].sort();
const out = (a: string): Set<string> => edges.get(a) ?? new Set();

const pairs = nodes.flatMap((a) => [...out(a)].filter((b) => a < b && out(b).has(a)).map((b) => `${a} <-> ${b}`));

// Knots: strongly connected components (Tarjan), emitted lowest first (a component after all it imports).
const index = new Map<string, number>();
const low = new Map<string, number>();
const stack: string[] = [];
const knots: string[][] = [];
let next = 0;
const strong = (v: string): void => {
  index.set(v, next);
  low.set(v, next++);
  stack.push(v);
  for (const w of out(v)) {
    if (!index.has(w)) {
      strong(w);
      low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
    } else if (stack.includes(w)) low.set(v, Math.min(low.get(v) ?? 0, index.get(w) ?? 0));
  }
  if (low.get(v) === index.get(v)) {
    const knot: string[] = [];
    let w: string | undefined;
    do {
      w = stack.pop();
      if (w !== undefined) knot.push(w);
    } while (w !== v);
    knots.push(knot.sort());
  }
};
for (const v of nodes) if (!index.has(v)) strong(v);

// Within a knot, the order (lowest first) with the fewest arrows up: dynamic programming over subsets.
function bestOrder(knot: string[]): string[] {
  if (knot.length === 1) return knot;
  const n = knot.length;
  const cost = new Array<number>(1 << n).fill(Number.POSITIVE_INFINITY);
  const pick = new Array<number>(1 << n).fill(-1);
  cost[0] = 0;
  for (let set = 0; set < 1 << n; set++) {
    const c = cost[set] ?? Number.POSITIVE_INFINITY;
    if (c === Number.POSITIVE_INFINITY) continue;
    for (let i = 0; i < n; i++) {
      if (set & (1 << i)) continue;
      // Placing knot[i] above everything in `set`: arrows from the set's folders up to knot[i] run up.
      let up = 0;
      for (let j = 0; j < n; j++) if (set & (1 << j) && out(knot[j] ?? '').has(knot[i] ?? '')) up++;
      const to = set | (1 << i);
      if (c + up < (cost[to] ?? Number.POSITIVE_INFINITY)) {
        cost[to] = c + up;
        pick[to] = i;
      }
    }
  }
  const order: string[] = [];
  for (let set = (1 << n) - 1; set > 0; set &= ~(1 << (pick[set] ?? 0))) order.unshift(knot[pick[set] ?? 0] ?? '');
  return order;
}
const order = knots.flatMap(bestOrder);
const rank = new Map(order.map((f, i) => [f, i]));
const floor = new Map<string, number>();
const up: string[] = [];
for (const f of order) {
  let fl = 1;
  for (const t of out(f)) {
    if ((rank.get(t) ?? 0) < (rank.get(f) ?? 0)) fl = Math.max(fl, (floor.get(t) ?? 0) + 1);
    else up.push(`${f} -> ${t}`);
  }
  floor.set(f, fl);
}

const lines = (file: string): number => readFileSync(join(ROOT, file), 'utf8').split('\n').length;
const biggest = (dir: string): string[] =>
  tsFiles(dir)
    .map((f) => ({ f, n: lines(f) }))
    .sort((a, b) => b.n - a.n)
    .slice(0, 5)
    .map(({ f, n }) => `  ${n} ${f}`);

console.log(`folders: ${nodes.length}, arrows between folders: ${nodes.reduce((n, a) => n + out(a).size, 0)}`);
console.log(`pairs that import each other: ${pairs.length}`);
for (const p of pairs) console.log(`  ${p}`);
const big = knots.filter((k) => k.length > 1);
console.log(
  `knots (folders that reach each other): ${big.map((k) => `${k.length} [${k.join(', ')}]`).join('; ') || 'none'}`,
);
console.log(`floors: ${Math.max(...floor.values())}, arrows up: ${up.length}`);
for (const u of up) console.log(`  up: ${u}`);
for (let fl = Math.max(...floor.values()); fl >= 1; fl--)
  console.log(`  floor ${fl}: ${order.filter((f) => floor.get(f) === fl).join(', ')}`);
console.log('biggest in src/:');
console.log(biggest('src').join('\n'));
console.log('biggest in test/:');
console.log(biggest('test').join('\n'));
