/**
 * The doctor's root-keys check (pure, from what the agent's fixed-path `root-keys` read printed): a line
 * of root's authorized_keys holding the worker's key without the agent's forced command fails (a stolen
 * worker key is a root shell there); the forced line of a `--root-forced` login is ok where root is the
 * login, a warning beside another account; no such line is ok.
 */
import { describe, expect, it } from 'vitest';
import { judge, type HostReading, type ProbeRun, type RootKeysReading } from '../../src/doctor/judge.ts';
import { parseKeyLine } from '../../src/doctor/root-keys.ts';
import { rootKeysRead } from '../../src/agent-grammar/templates/doctor-probes.ts';
import { VERBS } from '../../src/agent-grammar/verbs.ts';

const run = (code: number, stdout = '', stderr = ''): ProbeRun => ({
  ran: true,
  code,
  signal: null,
  stdout,
  stderr,
  timedOut: false,
});

const WORKER = 'AAAAC3NzaC1lZDI1NTE5AAAAIFBVrmcZrIFN6BGBd5jXiPic6QJcTjBZpCDx8MEGEM9B';
const OTHER = 'AAAAC3NzaC1lZDI1NTE5AAAAIHc2bGJ1T0pZcVZ6Q2F4N0p6b2xWdEc5bWZ2dHhxQkp';
const FORCED = `restrict,command="/usr/local/lib/gpu-medic/gpu-medic-agent",from="10.0.0.9" ssh-ed25519 ${WORKER} gpu-medic-worker`;

/** What the root-keys script prints for these authorized_keys lines (authorized_keys2 absent). */
function printed(lines: string[]): string {
  return [
    '@file /root/.ssh/authorized_keys',
    ...lines.map((l, i) => `${i + 1}:${l}`),
    '@absent /root/.ssh/authorized_keys2',
    '@end',
    '',
  ].join('\n');
}

function host(
  stdout: string,
  user = 'gpu-medic',
  worker: RootKeysReading['worker'] = { type: 'ssh-ed25519', blob: WORKER },
): HostReading {
  return {
    kind: 'host',
    machineId: 'kpro5',
    login: { via: 'ssh', user, where: `${user}@kpro5:22` },
    probes: { uname: run(0, '6.8.12-4-pve\n') },
    inits: [],
    rootKeys: { run: run(0, stdout), worker },
  };
}

const rootKeys = (h: HostReading) => {
  const f = judge([h]).findings.find((x) => x.check === 'root keys');
  if (f === undefined) throw new Error('no root keys finding');
  return f;
};

describe("the doctor's root-keys check", () => {
  it("a plain line with the worker's key (the old root-shell key, left behind): fail, naming the line, with install.sh's hint", () => {
    const f = rootKeys(host(printed([`ssh-ed25519 ${OTHER} admin@laptop`, `ssh-ed25519 ${WORKER} gpu-medic-worker`])));
    expect(f.status).toBe('fail');
    expect(f.detail).toBe(
      "root's authorized_keys line 2 holds the worker's key without the agent's forced command: a stolen worker key is a root shell here",
    );
    expect(f.hint).toContain('sh install.sh status');
    expect(f.hint).toContain('--remove-root-lines');
  });

  it('options that only restrict (no forced command) are still a root shell: fail', () => {
    const f = rootKeys(host(printed([`no-port-forwarding,from="10.0.0.9" ssh-ed25519 ${WORKER} w`])));
    expect(f.status).toBe('fail');
  });

  it('in authorized_keys2 too', () => {
    const out = `@absent /root/.ssh/authorized_keys\n@file /root/.ssh/authorized_keys2\n3:ssh-ed25519 ${WORKER}\n@end\n`;
    expect(rootKeys(host(out)).detail).toMatch(/^root's authorized_keys2 line 3 holds the worker's key without/);
  });

  it('the forced line: ok where root is the login (--root-forced), a warning beside the agent account', () => {
    expect(rootKeys(host(printed([FORCED]), 'root'))).toMatchObject({
      status: 'ok',
      detail:
        "root's authorized_keys line 1: the worker's key forced to the agent, the --root-forced login this worker uses",
    });
    const beside = rootKeys(host(printed([FORCED])));
    expect(beside.status).toBe('warn');
    expect(beside.detail).toContain('a second way in beside the gpu-medic account');
  });

  it("no line holds the worker's key: ok, saying what was read", () => {
    expect(rootKeys(host(printed([`ssh-ed25519 ${OTHER} admin@laptop`])))).toMatchObject({
      status: 'ok',
      detail: "no root line holds the worker's key (authorized_keys 1 key, authorized_keys2 absent)",
      hint: null,
    });
  });

  it("the worker's key named only inside another line's options or comment is no line of it", () => {
    const f = rootKeys(
      host(printed([`environment="X=ssh-ed25519 ${WORKER}" ssh-ed25519 ${OTHER} c`, `ssh-ed25519 ${OTHER} ${WORKER}`])),
    );
    expect(f.status).toBe('ok');
  });

  it('unreadable, cut or unfinished answers are warnings, never an ok', () => {
    const unreadable = '@unreadable /root/.ssh/authorized_keys\n@unreadable /root/.ssh/authorized_keys2\n@end\n';
    expect(rootKeys(host(unreadable, 'fleetuser')).status).toBe('warn');
    expect(rootKeys(host(printed([]).replace('@end\n', ''))).status).toBe('warn');
    const cut = printed([]).replace('@absent', '@cut /root/.ssh/authorized_keys\n@absent');
    expect(rootKeys(host(cut)).detail).toContain('only the first 128 KiB');
  });

  it('an agent without the verb, or a worker key that cannot be read: a warning saying it was not checked', () => {
    const old = host('');
    old.rootKeys = {
      run: run(126, '', 'gpu-medic-agent: refused: unknown verb root-keys\n'),
      worker: { type: 'ssh-ed25519', blob: WORKER },
    };
    expect(rootKeys(old)).toMatchObject({ status: 'warn', detail: expect.stringContaining('no root-keys read') });
    expect(rootKeys(host(printed([]), 'gpu-medic', { error: 'cannot read /k: ENOENT' })).status).toBe('warn');
  });

  it('no check without an agent reading (root-shell access)', () => {
    const h = host('');
    h.rootKeys = null;
    expect(judge([h]).findings.some((f) => f.check === 'root keys')).toBe(false);
  });

  it('parses a key line as sshd does: options field (quoted blanks and commas), type, blob', () => {
    expect(parseKeyLine(FORCED)).toEqual({
      options: ['restrict', 'command="/usr/local/lib/gpu-medic/gpu-medic-agent"', 'from="10.0.0.9"'],
      type: 'ssh-ed25519',
      blob: WORKER,
    });
    expect(parseKeyLine('# ssh-ed25519 AAAA')).toBeNull();
    expect(parseKeyLine('garbage')).toBeNull();
  });

  it("the verb is a fixed argv with no arguments, on a host or a self agent only, reading only root's two key files", () => {
    const spec = rootKeysRead(15_000);
    expect(spec.argv.slice(0, 2)).toEqual(['sh', '-c']);
    expect(spec.argv).toHaveLength(3);
    expect(spec.agent).toEqual({ verb: 'root-keys', args: [] });
    const def = VERBS['root-keys'];
    expect(def?.args).toEqual([]);
    expect(def?.variadic).toBeNull();
    expect(def?.on).toEqual(['host', 'self']);
    const paths = (spec.argv[2] ?? '').match(/\/[a-z][\w./]*/g) ?? [];
    expect([...new Set(paths)].sort()).toEqual(['/root', '/root/.ssh', '/authorized_keys', '/authorized_keys2'].sort());
  });
});
