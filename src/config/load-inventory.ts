import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { InventorySchema, type Inventory } from './inventory.ts';

export interface InventoryProblem {
  /** Where in the file, e.g. `hosts[0].hostKeys`. */
  at: string;
  message: string;
}

/** Validates an inventory document, including cross-references zod can't see alone. Pure. */
export function validateInventory(doc: unknown): { inventory: Inventory | null; problems: InventoryProblem[] } {
  const parsed = InventorySchema.safeParse(doc ?? {});
  if (!parsed.success) {
    return {
      inventory: null,
      problems: parsed.error.issues.map((i) => ({ at: formatPath(i.path), message: i.message })),
    };
  }
  const inv = parsed.data;
  const problems: InventoryProblem[] = [];
  const ids = new Map<string, string>();
  inv.hosts.forEach((h, i) => {
    const at = `hosts[${i}]`;
    if (ids.has(h.id)) problems.push({ at: `${at}.id`, message: `"${h.id}" is already used by ${ids.get(h.id)}` });
    ids.set(h.id, at);
    if (!h.keyFile && !inv.defaults.keyFile) problems.push({ at: `${at}.keyFile`, message: 'no key file here and none in defaults.keyFile' });
  });
  const vmids = new Map<string, string>();
  inv.containers.forEach((c, i) => {
    const at = `containers[${i}]`;
    if (ids.has(c.id)) problems.push({ at: `${at}.id`, message: `"${c.id}" is already used by ${ids.get(c.id)}` });
    ids.set(c.id, at);
    const host = inv.hosts.find((h) => h.id === c.host);
    if (!host) problems.push({ at: `${at}.host`, message: `no host "${c.host}" in hosts` });
    const key = `${c.host}/${c.vmid}`;
    if (vmids.has(key)) problems.push({ at: `${at}.vmid`, message: `vmid ${c.vmid} on ${c.host} is already ${vmids.get(key)}` });
    vmids.set(key, at);
    if (c.address && (!c.hostKeys || c.hostKeys.length === 0))
      problems.push({ at: `${at}.hostKeys`, message: 'a container with its own address needs its own pinned host key' });
    if (c.address && !c.keyFile && !inv.defaults.keyFile)
      problems.push({ at: `${at}.keyFile`, message: 'no key file here and none in defaults.keyFile' });
  });
  if (ids.has('all') || ids.has('help')) problems.push({ at: 'id', message: '"all" and "help" are reserved words, not machine ids' });
  return { inventory: problems.length === 0 ? inv : null, problems };
}

function formatPath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out === '' ? String(p) : `.${String(p)}`;
  return out === '' ? '(top level)' : out;
}

/** Reads a YAML (or JSON) inventory file. Never reads the key files it names. */
export async function loadInventoryFile(path: string): Promise<{ inventory: Inventory | null; problems: InventoryProblem[] }> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? 'error';
    return { inventory: null, problems: [{ at: path, message: `cannot read the inventory file (${code})` }] };
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    return { inventory: null, problems: [{ at: path, message: `not valid YAML: ${(e as Error).message.split('\n')[0]}` }] };
  }
  return validateInventory(doc);
}
