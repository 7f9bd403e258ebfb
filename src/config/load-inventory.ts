import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { ContainerSchema, DefaultsSchema, HostSchema, InventorySchema, type Inventory } from './inventory.ts';
import { closest } from './suggest.ts';

export interface InventoryProblem {
  /** Which part of the file, by machine id where there is one: `host kpro5`, `container ct129`, `defaults`. */
  at: string;
  /** Plain words, naming the field: `address is missing`. */
  message: string;
}

type Doc = Record<string, unknown>;
const isDoc = (v: unknown): v is Doc => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

const TOP_KEYS = Object.keys(InventorySchema.shape);

/**
 * Validates an inventory document in one pass: every entry's fields (named by the machine's id,
 * with the closest real field for an unknown one) and every rule across entries (duplicate ids
 * and vmids, a container's host, keys and pinned host keys), even when some entries are broken.
 * The inventory is returned only when there is no problem at all. Pure.
 */
export function validateInventory(doc: unknown): { inventory: Inventory | null; problems: InventoryProblem[] } {
  const problems: InventoryProblem[] = [];
  const raw: Doc = doc === null || doc === undefined ? {} : isDoc(doc) ? doc : {};
  if (!isDoc(doc) && doc !== null && doc !== undefined)
    problems.push({ at: '(top level)', message: 'must be a mapping with `defaults`, `hosts` and `containers`' });
  for (const k of Object.keys(raw))
    if (!TOP_KEYS.includes(k)) problems.push({ at: '(top level)', message: unknownField(k, TOP_KEYS) });

  const listOf = (key: 'hosts' | 'containers'): unknown[] => {
    const v = raw[key];
    if (v === undefined || v === null) return [];
    if (Array.isArray(v)) return v;
    problems.push({ at: key, message: `must be a list (each entry starting with "- id: ...")` });
    return [];
  };
  const hosts = listOf('hosts');
  const containers = listOf('containers');
  const defaults = raw.defaults ?? {};
  const d = DefaultsSchema.safeParse(defaults, { reportInput: true });
  if (!d.success) problems.push(...plainIssues('defaults', d.error.issues, Object.keys(DefaultsSchema.shape)));
  const defaultKey = isDoc(defaults) ? str(defaults.keyFile) : undefined;

  const labelOf = (kind: 'host' | 'container', e: unknown, i: number): string => {
    const id = isDoc(e) ? e.id : undefined;
    return typeof id === 'string' && id !== ''
      ? `${kind} ${/^[a-z0-9._-]+$/.test(id) ? id : JSON.stringify(id)}`
      : `${kind}s[${i}] (no id)`;
  };
  const seen = new Map<string, string>();
  const sameId = (e: unknown, label: string): void => {
    const id = isDoc(e) ? str(e.id) : undefined;
    if (id === undefined) return;
    const before = seen.get(id);
    if (before)
      problems.push({
        at: label,
        message: `id "${id}" is used twice (also by the ${before.split(' ')[0]} before it); ids must be unique`,
      });
    else seen.set(id, label);
    if (id === 'all' || id === 'help')
      problems.push({ at: label, message: `"${id}" is a reserved word in /gpu, not a machine id` });
  };

  const hostIds: string[] = [];
  hosts.forEach((h, i) => {
    const at = labelOf('host', h, i);
    const r = HostSchema.safeParse(h, { reportInput: true });
    if (!r.success) problems.push(...plainIssues(at, r.error.issues, Object.keys(HostSchema.shape)));
    sameId(h, at);
    const id = isDoc(h) ? str(h.id) : undefined;
    if (id) hostIds.push(id);
    if (isDoc(h) && !str(h.keyFile) && !defaultKey)
      problems.push({ at, message: 'has no keyFile, and defaults.keyFile is not set either' });
  });

  const vmids = new Map<string, string>();
  containers.forEach((c, i) => {
    const at = labelOf('container', c, i);
    const r = ContainerSchema.safeParse(c, { reportInput: true });
    if (!r.success) problems.push(...plainIssues(at, r.error.issues, Object.keys(ContainerSchema.shape)));
    sameId(c, at);
    if (!isDoc(c)) return;
    const host = str(c.host);
    if (host !== undefined && !hostIds.includes(host)) {
      const near = closest(host, hostIds);
      problems.push({
        at,
        message: `host "${host}" is not in hosts${near ? `; did you mean ${near}?` : hostIds.length ? ` (hosts: ${hostIds.join(', ')})` : ' (there are no hosts)'}`,
      });
    }
    if (host !== undefined && typeof c.vmid === 'number') {
      const key = `${host}/${c.vmid}`;
      const before = vmids.get(key);
      if (before) problems.push({ at, message: `vmid ${c.vmid} on ${host} is already ${before}` });
      else vmids.set(key, at);
    }
    if (str(c.address)) {
      if (!Array.isArray(c.hostKeys) || c.hostKeys.length === 0)
        problems.push({
          at,
          message: "has its own address, so it needs its own pinned hostKeys (its sshd is not its host's)",
        });
      if (!str(c.keyFile) && !defaultKey)
        problems.push({ at, message: 'has its own address but no keyFile, and defaults.keyFile is not set either' });
    }
  });

  if (problems.length > 0) return { inventory: null, problems };
  const parsed = InventorySchema.safeParse(raw);
  // Every part was checked above; a failure here would be a rule missing from the checks above.
  if (!parsed.success) return { inventory: null, problems: plainIssues('(top level)', parsed.error.issues, TOP_KEYS) };
  return { inventory: parsed.data, problems: [] };
}

function unknownField(key: string, known: readonly string[]): string {
  const near = closest(key, known);
  return `unknown field "${key}"${near ? `; did you mean ${near}?` : ` (known: ${known.join(', ')})`}`;
}

function fieldPath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out === '' ? String(p) : `.${String(p)}`;
  return out;
}

const KIND_WORDS: Record<string, string> = {
  string: 'text',
  number: 'a number',
  array: 'a list',
  object: 'a mapping',
  boolean: 'true or false',
};

/** zod's issues in our words: "address is missing", "unknown field "adress"; did you mean address?". */
function plainIssues(at: string, issues: readonly z.core.$ZodIssue[], known: readonly string[]): InventoryProblem[] {
  const out: InventoryProblem[] = [];
  for (const issue of issues) {
    const field = fieldPath(issue.path);
    const subject = field === '' ? 'this entry' : field;
    if (issue.code === 'unrecognized_keys') {
      for (const k of issue.keys) out.push({ at, message: unknownField(k, issue.path.length === 0 ? known : []) });
      continue;
    }
    if (issue.code === 'invalid_type' && issue.input === undefined) {
      out.push({ at, message: `${subject} is missing` });
      continue;
    }
    // Our schemas phrase every rule; only a shape mismatch we did not phrase falls back to the kind expected.
    const message =
      issue.message.startsWith('Invalid input') || issue.message.startsWith('Too ')
        ? `must be ${KIND_WORDS[String((issue as { expected?: unknown }).expected)] ?? 'something else'}`
        : issue.message;
    const shown =
      issue.input !== undefined && (typeof issue.input === 'string' || typeof issue.input === 'number')
        ? ` (it is ${JSON.stringify(issue.input)})`
        : '';
    out.push({ at, message: `${subject} ${message}${shown}` });
  }
  return out;
}

/** Reads a YAML (or JSON) inventory file. Never reads the key files it names. */
export async function loadInventoryFile(
  path: string,
): Promise<{ inventory: Inventory | null; problems: InventoryProblem[] }> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? 'error';
    const why =
      code === 'ENOENT'
        ? 'there is no such file (copy inventory.example.yaml, or set GPU_MEDIC_INVENTORY)'
        : code === 'EACCES'
          ? 'this user may not read it'
          : code;
    return { inventory: null, problems: [{ at: path, message: `cannot read the inventory file: ${why}` }] };
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    return {
      inventory: null,
      problems: [{ at: path, message: `not valid YAML: ${(e as Error).message.split('\n')[0]}` }],
    };
  }
  return validateInventory(doc);
}
