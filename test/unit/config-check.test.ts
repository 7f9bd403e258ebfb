/**
 * `config check` (and the same report from bot/worker/start refusing to start): every problem at
 * once, in plain words, machines named by id, with the closest real name for a typo.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runConfigCheck } from '../../src/cli/config-check.ts';
import { checkConfig, envFileKeyFilter } from '../../src/config/check.ts';
import { readEnvFile } from '../../src/config/dotenv.ts';
import { parseEnv } from '../../src/config/env.ts';
import { loadInventoryFile, validateInventory } from '../../src/config/load-inventory.ts';

const FP = `SHA256:${'A'.repeat(43)}`;
const lines = (r: { problems: Array<{ at: string; message: string }> }): string[] =>
  r.problems.map((p) => `${p.at}: ${p.message}`);
/** Words of zod's own messages, which must never reach an operator. */
const JARGON =
  /Invalid input|expected \w+, received|received undefined|NaN|Too (small|big)|Unrecognized key|invalid_type|too_small/;

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'gpu-medic-config-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Each role's two signing-key settings, pointing at real Ed25519 PEM files (docs/security.md). */
function signingKeys(): { bot: Record<string, string>; worker: Record<string, string> } {
  const pair = (name: string): { key: string; pub: string } => {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const key = join(dir, `${name}.key.pem`);
    const pub = join(dir, `${name}.pub.pem`);
    writeFileSync(key, privateKey.export({ type: 'pkcs8', format: 'pem' }));
    writeFileSync(pub, publicKey.export({ type: 'spki', format: 'pem' }));
    return { key, pub };
  };
  const bot = pair('bot');
  const worker = pair('worker');
  return {
    bot: { GPU_MEDIC_BOT_KEY_FILE: bot.key, GPU_MEDIC_WORKER_PUBLIC_KEY_FILES: worker.pub },
    worker: { GPU_MEDIC_WORKER_KEY_FILE: worker.key, GPU_MEDIC_BOT_PUBLIC_KEY_FILES: bot.pub },
  };
}

async function check(
  args: string[],
  env: Record<string, string>,
  inventoryYaml: string,
): Promise<{ code: number; out: string }> {
  const path = join(dir, `inv-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(path, inventoryYaml);
  let out = '';
  const sink = new Writable({ write: (c: Buffer, _e, cb) => ((out += c.toString()), cb()) });
  const code = await runConfigCheck(args, { GPU_MEDIC_INVENTORY: path, ...env }, sink);
  return { code, out };
}

const BROKEN_INVENTORY = `
defaults:
  keyFile: /etc/gpu-medic/ssh/id_ed25519
hosts:
  - id: kpro5
    address: 10.0.0.5
    hostKeys: [${FP}]
  - id: kpro6
    adress: 10.0.0.6
    hostKeys: [${FP}]
  - id: kpro5
    address: 10.0.0.7
    hostKeys: [${FP}]
containers:
  - id: ct129
    vmid: 129
    host: kpro7
`;

describe('config check names every problem at once', () => {
  it('env, schema and cross-field problems in one report: missing signing secret (http), unknown field, duplicate id, container on a missing host', async () => {
    const { code, out } = await check(
      ['bot'],
      { GPU_MEDIC_MODE: 'http', SLACK_BOT_TOKEN: 'xoxb-1', PORT: 'eighty' },
      BROKEN_INVENTORY,
    );
    expect(code).toBe(1);
    expect(out).toContain('SLACK_SIGNING_SECRET is required in http mode');
    expect(out).toContain('PORT must be a whole number from 0 to 65535 (it is "eighty")');
    expect(out).toContain('host kpro6: unknown field "adress"; did you mean address?');
    expect(out).toContain('host kpro6: address is missing');
    expect(out).toMatch(/host kpro5: id "kpro5" is used twice/);
    expect(out).toContain('container ct129: host "kpro7" is not in hosts; did you mean kpro5?');
    expect(out).toMatch(/^config check \(bot\): 6 problems\n/);
  });

  it('names machines by id, never by position in the file', () => {
    const r = validateInventory({
      hosts: [
        { id: 'kpro5', address: 'h', hostKeys: ['MD5:aa'] },
        { id: 'kpro6', hostKeys: [FP], keyFile: '/k' },
      ],
    });
    const all = lines(r).join('\n');
    expect(all).toContain('host kpro5: hostKeys[0] must be a SHA256:... fingerprint');
    expect(all).toContain('host kpro6: address is missing');
    expect(all).not.toMatch(/hosts\[\d\]/);
  });

  it('an entry without an id is named by its place and says the id is missing', () => {
    const r = validateInventory({ defaults: { keyFile: '/k' }, hosts: [{ address: 'h', hostKeys: [FP] }] });
    expect(lines(r)).toEqual(['hosts[0] (no id): id is missing']);
  });

  it('did-you-mean for unknown fields at every level and for unknown settings', () => {
    const r = validateInventory({ defualts: {}, defaults: { keyfile: '/k' }, hosts: [] });
    expect(lines(r)).toEqual([
      '(top level): unknown field "defualts"; did you mean defaults?',
      'defaults: unknown field "keyfile"; did you mean keyFile?',
    ]);
    const e = parseEnv({ GPU_MEDIC_APPROVER: 'U012AB' }, 'worker');
    expect(e.problems).toEqual([
      { variable: 'GPU_MEDIC_APPROVER', message: 'is not a gpu-medic setting; did you mean GPU_MEDIC_APPROVERS?' },
    ]);
    const m = parseEnv({ GPU_MEDIC_MODE: 'sockets', SLACK_BOT_TOKEN: 'xoxb-1', SLACK_APP_TOKEN: 'xapp-1' }, 'bot');
    expect(m.problems).toEqual([
      { variable: 'GPU_MEDIC_MODE', message: 'must be one of socket, http (it is "sockets"); did you mean socket?' },
    ]);
  });

  it('empty values are refused, with the default named (PORT= no longer means a random port)', () => {
    const r = parseEnv({ PORT: '', GPU_MEDIC_TERM_GRACE_SEC: ' ' }, 'start');
    expect(r.env).toBeNull();
    expect(r.problems).toContainEqual({
      variable: 'PORT',
      message: 'is empty: give it a value, or remove the line to use the default (3000)',
    });
    expect(r.problems).toContainEqual({
      variable: 'GPU_MEDIC_TERM_GRACE_SEC',
      message: 'is empty: give it a value, or remove the line to use the default (10)',
    });
    // Lists are the exception: empty is the empty list, which is what compose passes for an unset one.
    expect(parseEnv({ GPU_MEDIC_SITES: '' }, 'worker').problems).toEqual([]);
  });

  it('no parser jargon reaches the user, for any kind of wrong value', async () => {
    const inventory = `
defaults: { user: "Root", commandTimeoutSec: "20", connectTimeoutSec: 0 }
hosts:
  - { id: "Bad Id", address: "x;y", port: 70000, hostKeys: [] }
  - { id: h2, address: 5, hostKeys: "SHA256:x", site: [] }
  - null
containers:
  - { id: c1, vmid: "129", host: h2 }
  - { id: c2, vmid: 12.5, host: h2, address: c2.example, hostKeys: [] }
  - {}
`;
    const env = {
      PORT: '80x',
      GPU_MEDIC_POLL_MS: '5',
      GPU_MEDIC_APPROVAL_TTL_SEC: '1.5',
      GPU_MEDIC_MODE: 'HTTP',
      SLACK_API_URL: 'not a url',
      LOG_LEVEL: 'verbose',
      REDIS_URL: 'localhost',
      GPU_MEDIC_PREFIX: 'a b',
    };
    const { code, out } = await check([], env, inventory);
    expect(code).toBe(1);
    expect(out.split('\n').length).toBeGreaterThan(20);
    expect(out).not.toMatch(JARGON);
    expect(out).toContain('host "Bad Id": port must be a port number from 1 to 65535 (it is 70000)');
    expect(out).toContain(
      'container c1: vmid must be the Proxmox vmid, a whole number from 100 to 999999999 (it is "129")',
    );
    expect(out).toContain('hosts[2] (no id): this entry must be a mapping');
    expect(out).toContain('containers[2] (no id): id is missing');
  });

  it('says which deployment it assumed, and catches the compose Redis name used outside compose', async () => {
    const ok = `defaults: { keyFile: /k }\nhosts: [{ id: h1, address: 10.0.0.1, hostKeys: [${FP}] }]\n`;
    const local = await check(['worker'], { REDIS_URL: 'redis://redis:6379' }, ok);
    expect(local.code).toBe(1);
    expect(local.out).toContain('assuming a plain host, run from this checkout');
    expect(local.out).toContain(
      'REDIS_URL redis://redis:6379 names the docker compose service "redis", which exists only inside compose',
    );
    const compose = await check(
      ['worker'],
      { REDIS_URL: 'redis://redis:6379', GPU_MEDIC_DEPLOYMENT: 'compose', ...signingKeys().worker },
      ok,
    );
    expect(compose.out).toMatch(/^config check \(worker\): ok\. 1 machines/);
    expect(compose.out).toContain('assuming docker compose');
  });

  it('under compose or systemd (bot and worker always two processes), a role without its signing keys is a problem; run from a checkout it is not', async () => {
    const ok = `defaults: { keyFile: /k }\nhosts: [{ id: h1, address: 10.0.0.1, hostKeys: [${FP}] }]\n`;
    const slack = { SLACK_BOT_TOKEN: 'xoxb-test', SLACK_APP_TOKEN: 'xapp-test' };
    for (const deployment of ['compose', 'systemd']) {
      const bot = await check(['bot'], { ...slack, GPU_MEDIC_DEPLOYMENT: deployment }, ok);
      expect(bot.code).toBe(1);
      expect(bot.out).toContain(`GPU_MEDIC_BOT_KEY_FILE is not set: under ${deployment} the bot and the worker`);
      expect(bot.out).toContain(`GPU_MEDIC_WORKER_PUBLIC_KEY_FILES is not set: under ${deployment}`);
      const worker = await check(['worker'], { GPU_MEDIC_DEPLOYMENT: deployment }, ok);
      expect(worker.code).toBe(1);
      expect(worker.out).toContain(`GPU_MEDIC_WORKER_KEY_FILE is not set: under ${deployment}`);
      expect(worker.out).toContain(`GPU_MEDIC_BOT_PUBLIC_KEY_FILES is not set: under ${deployment}`);
      const keys = signingKeys();
      expect((await check(['bot'], { ...slack, GPU_MEDIC_DEPLOYMENT: deployment, ...keys.bot }, ok)).code).toBe(0);
      expect((await check(['worker'], { GPU_MEDIC_DEPLOYMENT: deployment, ...keys.worker }, ok)).code).toBe(0);
    }
    // From a checkout, `npm start` runs both roles in one process: keys of that process are enough.
    expect((await check(['worker'], {}, ok)).code).toBe(0);
    expect((await check(['start'], slack, ok)).code).toBe(0);
  });

  it('says what root-shell SSH access gives up, and says nothing of it under the default (agent)', async () => {
    const ok = `defaults: { keyFile: /k }\nhosts: [{ id: h1, address: 10.0.0.1, hostKeys: [${FP}] }]\n`;
    const shell = await check(['worker'], { GPU_MEDIC_SSH_ACCESS: 'root-shell' }, ok);
    expect(shell.code).toBe(0);
    expect(shell.out).toContain('SSH access root-shell (GPU_MEDIC_SSH_ACCESS)');
    expect(shell.out).toContain('a stolen worker key (or a bug in the worker) is a root shell on the whole fleet');
    const agent = await check(['worker'], {}, ok);
    expect(agent.code).toBe(0);
    expect(agent.out).not.toContain('root-shell');
    const wrong = await check(['worker'], { GPU_MEDIC_SSH_ACCESS: 'root' }, ok);
    expect(wrong.out).toContain('GPU_MEDIC_SSH_ACCESS must be one of agent, root-shell');
  });

  it('names the inventory machines with access: root-shell and what that gives up; says nothing without one', async () => {
    const hosts = (access: string) =>
      `defaults: { keyFile: /k }\nhosts: [{ id: h1, address: 10.0.0.1, hostKeys: [${FP}] }, { id: h2, address: 10.0.0.2, hostKeys: [${FP}]${access} }]\n`;
    const one = await check(['worker'], {}, hosts(', access: root-shell'));
    expect(one.code).toBe(0);
    expect(one.out).toContain(
      "SSH access root-shell on h2 (inventory access:): the worker's key opens a shell there, so a stolen worker key is a root shell on it",
    );
    const none = await check(['worker'], {}, hosts(''));
    expect(none.code).toBe(0);
    expect(none.out).not.toContain('root-shell');
  });

  it('an unknown role is refused with the closest one, and nothing is checked', async () => {
    const { code, out } = await check(['wroker'], {}, '{}');
    expect(code).toBe(2);
    expect(out).toBe(
      'config check: "wroker" is not a role; did you mean worker? (usage: config check [bot|worker|start]; nothing was checked)\n',
    );
  });

  it('a missing inventory file says so in words and how to fix it', async () => {
    const r = await checkConfig({ GPU_MEDIC_INVENTORY: join(dir, 'nope.yaml') }, 'worker', loadInventoryFile);
    expect(r.problems).toEqual([
      `inventory ${join(dir, 'nope.yaml')}: ${join(dir, 'nope.yaml')}: cannot read the inventory file: there is no such file (copy inventory.example.yaml, or set GPU_MEDIC_INVENTORY)`,
    ]);
  });
});

describe('each role reads only its own settings', () => {
  it('the worker ignores the Slack settings in a shared file (an empty SLACK_BOT_TOKEN no longer stops it)', () => {
    expect(
      parseEnv({ SLACK_BOT_TOKEN: '', SLACK_APP_TOKEN: '', GPU_MEDIC_MODE: 'http', PORT: '' }, 'worker').problems,
    ).toEqual([]);
  });

  it('the worker refuses a Slack secret in its inherited environment, naming it', () => {
    const r = parseEnv({ SLACK_BOT_TOKEN: 'xoxb-123' }, 'worker');
    expect(r.env).toBeNull();
    expect(r.problems.map((p) => p.variable)).toEqual(['SLACK_BOT_TOKEN']);
    expect(r.problems[0]?.message).toMatch(/must never hold a Slack secret/);
    expect(JSON.stringify(r)).not.toContain('xoxb-123');
  });

  it("the bot refuses the worker's secret in its inherited environment, naming it", () => {
    const r = parseEnv(
      { SLACK_BOT_TOKEN: 'xoxb-1', SLACK_APP_TOKEN: 'xapp-1', GPU_MEDIC_WORKER_SECRET: 'w'.repeat(40) },
      'bot',
    );
    expect(r.problems.map((p) => p.variable)).toEqual(['GPU_MEDIC_WORKER_SECRET']);
    expect(JSON.stringify(r)).not.toContain('w'.repeat(40));
    expect(parseEnv({ GPU_MEDIC_WORKER_SECRET: 'w'.repeat(40) }, 'worker').problems).toEqual([]);
  });

  it('a REDIS_ name is flagged only when it is a near miss of a real setting', () => {
    expect(parseEnv({ REDIS_SENTINEL: 'a:1', REDIS_HOST: 'x', REDIS_PASSWORD_FILE: '/p' }, 'worker').problems).toEqual([
      { variable: 'REDIS_SENTINEL', message: 'is not a gpu-medic setting; did you mean REDIS_SENTINELS?' },
    ]);
  });

  it('a .env holding everything gives the worker none of the Slack lines and the bot all of them', () => {
    const path = join(dir, 'all.env');
    writeFileSync(
      path,
      '# comment\nSLACK_BOT_TOKEN=xoxb-secret-1\nexport SLACK_APP_TOKEN="xapp-secret-2"\nREDIS_URL=redis://127.0.0.1:6379 # local\nGPU_MEDIC_SITES=lab\nGPU_MEDIC_SITE=typo\nPATH=/evil\n',
    );
    // Unknown names that look like ours are kept, so that the check can name the typo.
    expect(readEnvFile(path, envFileKeyFilter('worker'))?.values).toEqual({
      REDIS_URL: 'redis://127.0.0.1:6379',
      GPU_MEDIC_SITES: 'lab',
      GPU_MEDIC_SITE: 'typo',
    });
    expect(readEnvFile(path, envFileKeyFilter('bot'))?.values).toEqual({
      SLACK_BOT_TOKEN: 'xoxb-secret-1',
      SLACK_APP_TOKEN: 'xapp-secret-2',
      REDIS_URL: 'redis://127.0.0.1:6379',
      GPU_MEDIC_SITE: 'typo',
    });
    expect(readEnvFile(join(dir, 'missing.env'), () => true)).toBeNull();
  });

  it('a .env line that is not KEY=value is named by number (never shown) instead of dropped in silence', () => {
    const path = join(dir, 'bad.env');
    writeFileSync(path, '# ok\n\nSLACK_BOT_TOKEN: xoxb-secret-3\nREDIS_URL=redis://127.0.0.1:6379\n  \n1PORT=3\n');
    const r = readEnvFile(path, envFileKeyFilter('worker'));
    expect(r?.badLines).toEqual([3, 6]);
    expect(r?.values).toEqual({ REDIS_URL: 'redis://127.0.0.1:6379' });
    expect(JSON.stringify(r)).not.toContain('xoxb-secret-3');
  });
});

describe('one pass whatever the mix of problems', () => {
  it('single-value problems (RAM % out of range, an approver by name, a token with the wrong prefix) and cross-setting ones (alerts channel not allowed, escalation that never happens) and placeholder fingerprints, all in one report', async () => {
    const example = `
hosts:
  - id: kpro5
    address: 10.0.0.5
    hostKeys: [SHA256:kpro5hostKEYexamplePLACEHOLDERreplaceMe0000]
containers:
  - id: ct131
    vmid: 131
    host: kpro5
    address: 10.0.0.131
    hostKeys: [SHA256:ct131ownKEYexamplePLACEHOLDERreplaceMe00000]
defaults:
  keyFile: /etc/gpu-medic/ssh/id_ed25519
`;
    const { code, out } = await check(
      ['bot'],
      {
        SLACK_BOT_TOKEN: 'xapp-wrong-kind',
        SLACK_APP_TOKEN: 'xapp-1',
        GPU_MEDIC_WATCH_RAM_PCT: '150',
        GPU_MEDIC_APPROVERS: 'alice',
        GPU_MEDIC_ALERTS_CHANNEL: 'C0ALERTS01',
        GPU_MEDIC_ALLOWED_CHANNELS: 'C0ONCALL01',
        GPU_MEDIC_ESCALATION_APPROVERS: 'U0ERIN0001',
        GPU_MEDIC_ESCALATE_AFTER_SEC: '0',
      },
      example,
    );
    expect(code).not.toBe(0);
    expect(out).toMatch(/GPU_MEDIC_WATCH_RAM_PCT .*150/);
    expect(out).toMatch(/GPU_MEDIC_APPROVERS must be Slack user IDs/);
    expect(out).toMatch(/SLACK_BOT_TOKEN must be a bot token/);
    expect(out).toMatch(/GPU_MEDIC_ALERTS_CHANNEL C0ALERTS01 is not in GPU_MEDIC_ALLOWED_CHANNELS/);
    expect(out).toMatch(/GPU_MEDIC_ESCALATE_AFTER_SEC is 0, so the escalation group/);
    expect(out).toMatch(/host kpro5: hostKeys.*placeholder from inventory\.example\.yaml/);
    expect(out).toMatch(/container ct131: hostKeys.*placeholder from inventory\.example\.yaml/);
    expect(out).toMatch(/: 7 problems\n/);
  });
});
