import { parseEnv, SETTINGS, settingsFor, type Env, type Role } from './env.ts';
import type { Inventory } from './inventory.ts';
import type { InventoryProblem } from './load-inventory.ts';
import { listMachines, sitesOf } from './machines.ts';
import { keyProblems } from '../auth/keys.ts';

export type Deployment = Env['GPU_MEDIC_DEPLOYMENT'];

/** What each documented way of running gpu-medic means, said back by `config check`. */
const ASSUMED: Record<Deployment, string> = {
  local:
    'a plain host, run from this checkout (npm start, npm run bot|worker): settings from the environment and ./.env, Redis at REDIS_URL (default redis://127.0.0.1:6379, a local Redis)',
  systemd:
    'a plain host under systemd (deploy/systemd/): settings from the unit and /etc/gpu-medic/.env, Redis at REDIS_URL (a local Redis unless you point it elsewhere)',
  compose:
    'docker compose (docker-compose.yml): settings from .env through the compose file, Redis the compose service "redis", the inventory and ./ssh mounted under /etc/gpu-medic',
};

export interface ConfigReport {
  role: Role;
  deployment: Deployment;
  /** One plain sentence per problem, each naming the setting or the machine. */
  problems: string[];
  env: Env | null;
  inventory: Inventory | null;
}

/**
 * Every problem with the settings and the inventory a role would start with, in one pass: the
 * same report for `config check` and for `bot`/`worker`/`start` when they refuse to start.
 * `loadInventory` is the only I/O, passed in.
 */
export async function checkConfig(
  source: Record<string, string | undefined>,
  role: Role,
  loadInventory: (path: string) => Promise<{ inventory: Inventory | null; problems: InventoryProblem[] }>,
  /** Problems found before parsing, e.g. lines of .env that are not KEY=value. */
  earlier: readonly string[] = [],
): Promise<ConfigReport> {
  const e = parseEnv(source, role);
  const deployment: Deployment =
    source.GPU_MEDIC_DEPLOYMENT === 'compose' || source.GPU_MEDIC_DEPLOYMENT === 'systemd'
      ? source.GPU_MEDIC_DEPLOYMENT
      : 'local';
  const problems = [...earlier, ...e.problems.map((p) => `${p.variable} ${p.message}`)];
  const redisUrl = source.REDIS_URL ?? 'redis://127.0.0.1:6379';
  if (deployment !== 'compose' && /^rediss?:\/\/([^@/]*@)?redis(:\d+)?(\/|$)/.test(redisUrl))
    problems.push(
      `REDIS_URL ${redisUrl} names the docker compose service "redis", which exists only inside compose; on this host use a local Redis (redis://127.0.0.1:6379) or set GPU_MEDIC_DEPLOYMENT=compose if this runs in compose`,
    );
  // A key file that is set must be readable and an Ed25519 key (the key's text is never shown).
  if (e.env) for (const why of keyProblems(e.env, role)) problems.push(why);
  if (e.env && deployment !== 'local') for (const why of unsetKeys(e.env, role, deployment)) problems.push(why);
  const path = source.GPU_MEDIC_INVENTORY || './inventory.yaml';
  const inv = await loadInventory(path);
  for (const p of inv.problems) problems.push(`inventory ${path}: ${p.at}: ${p.message}`);
  return {
    role,
    deployment,
    problems,
    env: problems.length === 0 ? e.env : null,
    inventory: problems.length === 0 ? inv.inventory : null,
  };
}

/** Each split role's own key settings: without them it signs and verifies with keys of its process only. */
const OWN_KEYS = {
  bot: ['GPU_MEDIC_BOT_KEY_FILE', 'GPU_MEDIC_WORKER_PUBLIC_KEY_FILES'],
  worker: ['GPU_MEDIC_WORKER_KEY_FILE', 'GPU_MEDIC_BOT_PUBLIC_KEY_FILES'],
} as const;

/**
 * Under compose or systemd the bot and the worker are always two processes, and a role that signs
 * and verifies with keys of its own process only is one the other acts on never: every request is
 * refused, and `config check` used to pass. (`start`, both roles in one process, needs none.)
 */
function unsetKeys(env: Env, role: Role, deployment: Deployment): string[] {
  if (role === 'start') return [];
  return OWN_KEYS[role]
    .filter((k) => {
      const v = env[k];
      return v === undefined || v.length === 0;
    })
    .map(
      (k) =>
        `${k} is not set: under ${deployment} the bot and the worker are two processes, and without the signing keys neither acts on what the other signs (make them and set all four GPU_MEDIC_*_KEY_FILE(S) lines: docs/security.md, "Making the keys")`,
    );
}

/** What GPU_MEDIC_SSH_ACCESS=root-shell gives up (a stolen worker key is a root shell), said on every `config check`. */
const ROOT_SHELL =
  '  SSH access root-shell (GPU_MEDIC_SSH_ACCESS): the worker sends shell lines, so its key must open a shell on every machine: a stolen worker key (or a bug in the worker) is a root shell on the whole fleet, and no host checks that a signal or reset was requested and approved. Install gpu-medic-agent on each host (agent/install.sh, docs/deploy.md) and unset it to go back to the default, agent.\n';

/** "assuming ..." line plus either the problems or a one-line summary. */
export function formatReport(r: ConfigReport, heading: string): string {
  const assumed = `  assuming ${ASSUMED[r.deployment]} (GPU_MEDIC_DEPLOYMENT=${r.deployment})\n`;
  if (r.problems.length > 0)
    return `${heading}: ${r.problems.length} problem${r.problems.length === 1 ? '' : 's'}\n${assumed}${r.problems.map((l) => `  - ${l}`).join('\n')}\n`;
  const machines = r.inventory ? listMachines(r.inventory) : [];
  const hosts = machines.filter((m) => m.kind === 'host').length;
  const mode = r.role === 'worker' ? '' : `; mode ${r.env?.GPU_MEDIC_MODE}`;
  const inv = r.inventory;
  const shellMachines = inv
    ? [...inv.hosts, ...inv.containers].filter((m) => m.access === 'root-shell').map((m) => m.id)
    : [];
  // One machine's `access: root-shell` gives up, for that machine, what the setting gives up for all.
  const perMachine =
    r.role !== 'bot' && r.env?.GPU_MEDIC_SSH_ACCESS !== 'root-shell' && shellMachines.length > 0
      ? `  SSH access root-shell on ${shellMachines.join(', ')} (inventory access:): the worker's key opens a shell there, so a stolen worker key is a root shell on ${shellMachines.length === 1 ? 'it' : 'them'}, and no host checks that a signal or reset was requested and approved. Install gpu-medic-agent there (agent/install.sh) and remove the access: line.\n`
      : '';
  return `${heading}: ok. ${machines.length} machines (${hosts} hosts, ${machines.length - hosts} containers) in sites ${inv ? sitesOf(inv).join(', ') || '-' : '-'}${mode}\n${assumed}${r.role !== 'bot' && r.env?.GPU_MEDIC_SSH_ACCESS === 'root-shell' ? ROOT_SHELL : ''}${perMachine}`;
}

/** Which names a role takes from a .env file: its own settings, and unknown names that look like ours (to name the typo). Never another role's secret. */
export function envFileKeyFilter(role: Role): (key: string) => boolean {
  const mine = new Set<string>(settingsFor(role));
  const known = new Set<string>(SETTINGS);
  return (key) => {
    if (mine.has(key)) return true;
    if (known.has(key)) return false;
    if (key.startsWith('SLACK_')) return role !== 'worker';
    return key.startsWith('GPU_MEDIC_');
  };
}
