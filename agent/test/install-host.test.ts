/**
 * install.sh on a simulated host (agent-host.ts: a real sshd, the agent installed by the real
 * install.sh), for what needs real accounts and real logins: taking over an existing account
 * (finding 7), what `status` shows of the account, and a key rotation across a fleet of hosts
 * (finding 9). Every account and root file here lives in the host's private mount namespace
 * (overlays of /etc and /var, a tmpfs over /root): never the machine's own.
 */
import { createHash, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../test/harness/sshd.ts';
import { type AgentHost, hostInstall, inHostNs, PASSED_GPU, privateRootHome, startAgentHost } from './agent-host.ts';
import { APPROVAL, decision, INCIDENT, plan, request, stdinOf } from './envelopes.ts';

/** An account made by someone else, as a container's owner would have it: a home, a key in each file, sudo. */
async function makeForeignAccount(host: AgentHost, name: string) {
  const own = await generateKeyPair(host.dir, `${name}_own`);
  const own2 = await generateKeyPair(host.dir, `${name}_own2`);
  const script = [
    `useradd -m -d /home/${name} -s /bin/bash -G sudo ${name}`,
    `usermod -p '*' ${name}`,
    // sshd's StrictModes refuses a home that group or others may write (the caller's umask decides useradd's).
    `chmod 0750 /home/${name}`,
    `install -d -o ${name} -m 0700 /home/${name}/.ssh`,
    `cat '${own.privateKeyPath}.pub' > /home/${name}/.ssh/authorized_keys`,
    `cat '${own2.privateKeyPath}.pub' > /home/${name}/.ssh/authorized_keys2`,
    `chown ${name} /home/${name}/.ssh/authorized_keys /home/${name}/.ssh/authorized_keys2`,
  ].join(' && ');
  const r = await inHostNs(host, ['sh', '-c', script]);
  if (r.code !== 0) throw new Error(r.out);
  return { own: own.privateKeyPath, own2: own2.privateKeyPath };
}

const groupsOf = async (host: AgentHost, name: string) => (await inHostNs(host, ['id', '-Gn', name])).out.trim();

describe('(c) finding 7: an existing account install.sh did not make is refused, unless adopted', () => {
  let host: AgentHost;
  beforeAll(async () => {
    host = await startAgentHost();
    await privateRootHome(host);
  }, 60_000);
  afterAll(async () => {
    await host?.stop();
  });

  it('install --user <an existing account> is refused before anything is written: its groups and keys stay', async () => {
    const name = 'gmtforeign1';
    const keys = await makeForeignAccount(host, name);
    const r = await hostInstall(
      host,
      'install',
      '--user',
      name,
      '--key',
      `${host.clientKey}.pub`,
      '--machine',
      'pve-1',
    );
    expect(r.code).not.toBe(0);
    expect(r.out).toContain(`the account ${name} exists and install.sh did not make it`);
    expect(r.out).toContain('--adopt');
    expect(await groupsOf(host, name)).toBe(`${name} sudo`);
    expect((await inHostNs(host, ['test', '-e', `/etc/sudoers.d/${name}`])).code).not.toBe(0);
    // Its own key still logs in (a shell: the account is untouched).
    const own = await host.ssh(['echo', 'own-shell'], { identity: keys.own2, user: name });
    expect(own).toMatchObject({ code: 0, stdout: 'own-shell\n' });
  });

  it('the same install with --adopt is accepted: its other keys and groups are dropped and said; only the agent remains', async () => {
    const name = 'gmtforeign2';
    const keys = await makeForeignAccount(host, name);
    const r = await hostInstall(
      host,
      'install',
      '--user',
      name,
      '--key',
      `${host.clientKey}.pub`,
      '--adopt',
      '--machine',
      'pve-1',
    );
    expect(r.code).toBe(0);
    expect(r.out).toContain(`adopted ${name}: dropped its supplementary groups: sudo`);
    expect(r.out).toContain(`adopted ${name}: dropped /home/${name}/.ssh/authorized_keys (1 key line(s))`);
    expect(r.out).toContain(`adopted ${name}: dropped /home/${name}/.ssh/authorized_keys2 (1 key line(s))`);
    expect(await groupsOf(host, name)).toBe(name);
    for (const identity of [keys.own, keys.own2]) {
      const other = await host.ssh(['echo', 'own-shell'], { identity, user: name });
      expect(other.code).toBe(255);
      expect(other.stdout).toBe('');
    }
    expect(await host.ssh(['gpu-medic', '1', 'version'], { user: name })).toMatchObject({
      code: 0,
      stdout: 'gpu-medic-agent 2.0.0 protocol 1\n',
    });
    // Installing again needs no --adopt: the account is recorded as adopted.
    const again = await hostInstall(host, 'install', '--user', name, '--key', `${host.clientKey}.pub`);
    expect(again.code).toBe(0);
    expect(again.out).toContain(`account ${name} exists (made or adopted by install.sh`);
  });

  it('(d) status lists the account, its groups and every key file with its line count; a group added later is a warning', async () => {
    const st = await hostInstall(host, 'status', '--user', host.user);
    expect(st.out).toContain(
      `account ${host.user} (made by install.sh): shell /bin/sh, home /var/lib/${host.user}, groups: ${host.user}`,
    );
    expect(st.out).toContain(`key file /var/lib/${host.user}/.ssh/authorized_keys: 1 line(s), root:root 644`);
    expect(st.out).toContain(`key file /var/lib/${host.user}/.ssh/authorized_keys2: none`);
    expect(st.out).toContain('root key file /root/.ssh/authorized_keys: none');
    expect(st.out).toContain('root key file /root/.ssh/authorized_keys2: none');
    expect(st.out).toContain('machine=pve-1 vmid= role=host');
    expect(st.code).toBe(0);
    expect((await inHostNs(host, ['usermod', '-aG', 'sudo', host.user])).code).toBe(0);
    try {
      const st2 = await hostInstall(host, 'status', '--user', host.user);
      expect(st2.out).toContain(`groups: ${host.user} sudo`);
      expect(st2.out).toContain(`WARNING: ${host.user} is in groups beyond its own`);
      expect(st2.code).toBe(1);
    } finally {
      await inHostNs(host, ['gpasswd', '-d', host.user, 'sudo']);
    }
  });

  it("(b) with the account: a plain line of the worker's key in root's authorized_keys is reported by status and removed by --remove-root-lines", async () => {
    const blob = (await readFile(`${host.clientKey}.pub`, 'utf8')).split(' ')[1];
    const w = await inHostNs(host, [
      'sh',
      '-c',
      `install -d -m 0700 /root/.ssh && echo 'ssh-ed25519 ${blob} old-root-shell' > /root/.ssh/authorized_keys`,
    ]);
    expect(w.code).toBe(0);
    const st = await hostInstall(host, 'status', '--user', host.user);
    expect(st.out).toMatch(
      /WARNING: \/root\/.ssh\/authorized_keys line 1 \(SHA256:\S+ old-root-shell\) holds the worker's key WITHOUT/,
    );
    const up = await hostInstall(host, 'upgrade', '--user', host.user, '--remove-root-lines');
    expect(up.code).toBe(0);
    expect(up.out).toContain('removed /root/.ssh/authorized_keys line 1');
    expect((await inHostNs(host, ['cat', '/root/.ssh/authorized_keys'])).out).toBe('');
  });
});

describe('(e) finding 9: a key rotation across the fleet, with no refused action in between', () => {
  const N = 2;
  let hosts: AgentHost[] = [];
  let newSsh: string;
  let newBot: { privateKey: KeyObject; pem: string };
  beforeAll(async () => {
    hosts = await Promise.all(Array.from({ length: N }, () => startAgentHost()));
    newSsh = (await generateKeyPair(hosts[0]?.dir as string, 'worker_ssh_new')).privateKeyPath;
    const kp = generateKeyPairSync('ed25519');
    const pem = join(hosts[0]?.dir as string, 'bot-new.pub.pem');
    await writeFile(pem, kp.publicKey.export({ type: 'spki', format: 'pem' }));
    newBot = { privateKey: kp.privateKey, pem };
  }, 90_000);
  afterAll(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
  });

  const version = (h: AgentHost, identity?: string) => h.ssh(['gpu-medic', '1', 'version'], { identity });
  /** A tier-2 reset whose decision the given bot key signed: did nvidia-smi --gpu-reset run? */
  async function reset(h: AgentHost, botKey: KeyObject, identity?: string) {
    const before = (await h.ran()).length;
    const p = plan(h.worker.privateKey, { approvalId: APPROVAL, kind: 'host_reset', gpuUuids: [PASSED_GPU] });
    const r = await h.ssh(['gpu-medic', '1', '10000', 'host', 'reset', PASSED_GPU, INCIDENT, APPROVAL], {
      input: stdinOf({ plan: p, request: request(botKey), decision: decision(botKey, p) }),
      identity,
    });
    const ran = (await h.ran()).slice(before);
    return { code: r.code, stderr: r.stderr, reset: ran.includes(`--gpu-reset -i ${PASSED_GPU}`) };
  }
  const works = { code: 0, stderr: '', reset: true };
  const oldBotFingerprint = (h: AgentHost) =>
    createHash('sha256')
      .update(createPublicKey(h.bot.privateKey).export({ type: 'spki', format: 'der' }))
      .digest('hex');

  it('old keys work; add the new; both work; remove the old; the old is refused, the new works', async () => {
    for (const h of hosts) {
      expect((await version(h)).code).toBe(0);
      expect(await reset(h, h.bot.privateKey)).toEqual(works);
    }
    // Step 1 on every host: add the new SSH key and the new bot key beside the old ones.
    for (const h of hosts) {
      const r = await hostInstall(
        h,
        'upgrade',
        '--user',
        h.user,
        '--key',
        `${newSsh}.pub`,
        '--key-name',
        'worker-2026',
        '--bot-key',
        newBot.pem,
        '--bot-key-name',
        'bot-2026',
      );
      expect(r.code).toBe(0);
      // Between hosts: what the worker holds still works everywhere, with either key.
      for (const g of hosts) {
        expect((await version(g)).code).toBe(0);
        expect(await reset(g, g.bot.privateKey)).toEqual(works);
      }
    }
    for (const h of hosts) {
      expect((await version(h, newSsh)).code).toBe(0);
      expect(await reset(h, newBot.privateKey, newSsh)).toEqual(works);
      expect(await reset(h, h.bot.privateKey, newSsh)).toEqual(works);
    }
    // Step 2 (the worker and the bot now use the new keys): remove the old ones, host by host.
    for (const h of hosts) {
      const r = await hostInstall(
        h,
        'upgrade',
        '--user',
        h.user,
        '--remove-key',
        'gpu-medic-worker',
        '--remove-bot-key',
        oldBotFingerprint(h),
      );
      expect(r.code).toBe(0);
      for (const g of hosts) expect(await reset(g, newBot.privateKey, newSsh)).toEqual(works);
    }
    for (const h of hosts) {
      const oldLogin = await version(h);
      expect(oldLogin.code).toBe(255);
      expect(oldLogin.stderr).toContain('Permission denied');
      const oldBot = await reset(h, h.bot.privateKey, newSsh);
      expect(oldBot).toEqual({
        code: 126,
        stderr: expect.stringMatching(
          /^gpu-medic-agent: refused: the request does not carry a valid signature of the bot/,
        ),
        reset: false,
      });
      expect(await reset(h, newBot.privateKey, newSsh)).toEqual(works);
    }
  });
});
