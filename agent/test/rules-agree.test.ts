/**
 * The host agent and the worker judge a container's processes and GPUs by the same rules, written
 * twice (Perl on the host, TypeScript in the worker): a process is the container's when its cgroup
 * says `lxc/<vmid>` (src/gpu/container-cgroup.ts), and a GPU is passed to it when its `pct config`
 * binds that device minor (src/agent-grammar/templates/unstick-commands.ts), the minor mapped to a
 * UUID by `nvidia-smi -q -x`. This feeds both the same inputs (cgroup v1 and v2 lines, real configs
 * and captures from the fixtures, and hostile variants) and requires the same answers. The Perl is
 * the core's own text: each sub is cut out of agent/gpu-medic-agent.pl and run alone.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parsePctConfigGpuMinors, parseXmlGpuMinors } from '../../src/agent-grammar/templates/unstick-commands.ts';
import { inContainerCgroup } from '../../src/gpu/container-cgroup.ts';
import { AGENT_DIR } from './agent-host.ts';

const FIXTURES = join(AGENT_DIR, '..', 'test', 'fixtures');
const CORE = readFileSync(join(AGENT_DIR, 'gpu-medic-agent.pl'), 'utf8');

/** One sub of the core, verbatim: from `sub <name> (` to its closing brace at the start of a line. */
function perlSub(name: string): string {
  const m = new RegExp(`^sub ${name} \\([^)]*\\) \\{\\n[\\s\\S]*?^\\}\\n`, 'm').exec(CORE);
  if (!m) throw new Error(`no sub ${name} in the core`);
  return m[0];
}

/** Runs the core's subs on JSON cases: each case is [sub name, ...args]; the answers as JSON. */
function perl(cases: Array<[string, ...unknown[]]>): unknown[] {
  const script = [
    'use v5.36;',
    'use JSON::PP ();',
    perlSub('in_container_cgroup'),
    perlSub('pct_gpu_minors'),
    perlSub('xml_gpu_minors'),
    'my $j = JSON::PP->new->canonical->allow_nonref;',
    'local $/; my $cases = $j->decode(<STDIN>);',
    'my @out;',
    'for my $c (@$cases) {',
    '  my ($f, @a) = @$c;',
    "  if ($f eq 'cgroup') { push @out, in_container_cgroup($a[0], $a[1]) ? JSON::PP::true : JSON::PP::false; }",
    "  elsif ($f eq 'minors') { push @out, [pct_gpu_minors($a[0])]; }",
    "  elsif ($f eq 'xml') { push @out, xml_gpu_minors($a[0]); }",
    '}',
    'print $j->encode(\\@out);',
  ].join('\n');
  const r = spawnSync('perl', ['-e', script], { input: JSON.stringify(cases), encoding: 'utf8' });
  if (r.status !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout) as unknown[];
}

const CGROUPS: Array<[string, string]> = [
  ['v2, the container payload', '0::/lxc/129/ns/user.slice/session.scope\n'],
  ['v2, the container itself', '0::/lxc/129\n'],
  ['v2, another container', '0::/lxc/130/ns/init.scope\n'],
  ['v2, the monitor (not the container)', '0::/lxc.monitor/129\n'],
  ['v2, the host', '0::/system.slice/pve-cluster.service\n'],
  ['v2, LXC default naming (not Proxmox)', '0::/lxc.payload.129/init.scope\n'],
  ['v2, a cgroup named lxc/129 made inside 130', '0::/lxc/130/ns/lxc/129\n'],
  [
    'v1, every hierarchy in the container',
    '12:pids:/lxc/129/ns\n11:memory:/lxc/129/ns\n10:devices:/lxc/129/ns\n1:name=systemd:/lxc/129/ns/init.scope\n0::/lxc/129/ns\n',
  ],
  ['v1, systemd at / and the rest in the container', '9:name=systemd:/\n8:pids:/lxc/129/ns\n0::/\n'],
  ['v1, hierarchies disagree', '8:pids:/lxc/129/ns\n4:memory:/lxc/130/ns\n'],
  ['v1, only the host', '9:name=systemd:/\n8:pids:/\n0::/\n'],
  ['not a cgroup line', 'garbage\n0::/lxc/129\n'],
  ['empty', ''],
  ['vmid with a leading zero', '0::/lxc/0129/ns\n'],
];

describe('the host agent and the worker agree', () => {
  it('on which container a process is in, by its cgroup lines (v1 and v2), for 129 and 130', () => {
    const cases = CGROUPS.flatMap(([, text]) =>
      [129, 130].map((v) => ['cgroup', text, String(v)] as [string, ...unknown[]]),
    );
    const ts = CGROUPS.flatMap(([, text]) => [129, 130].map((v) => inContainerCgroup(text, v)));
    expect(perl(cases)).toEqual(ts);
    // The cases are not all one answer: both rules say yes and no.
    expect(ts.filter(Boolean).length).toBeGreaterThan(3);
    expect(ts.filter((x) => !x).length).toBeGreaterThan(3);
  });

  it("on which GPU minors a container's pct config passes, for every real config and hostile variants", () => {
    const dir = join(FIXTURES, 'proxmox', 'pct-config');
    const real = readdirSync(dir).map((f) => readFileSync(join(dir, f), 'utf8'));
    const hostile = [
      'lxc.cgroup2.devices.allow: c 195:* rwm\n', // an allow line alone passes nothing
      'dev0: /dev/nvidia3,gid=44\ndev1: path=/dev/nvidia7\n',
      'lxc.mount.entry: /dev/nvidia2 dev/nvidia2 none bind,optional,create=file\n',
      '#dev0: /dev/nvidia1\ndev1: /dev/nvidiactl\ndev2: /dev/nvidia-uvm\n',
      'dev0: /dev/nvidia4\n[snap1]\ndev0: /dev/nvidia5\n', // snapshots are not the current config
      'dev0: /dev/nvidia12345\n',
      '  dev0:   /dev/nvidia6  \n',
    ];
    const inputs = [...real, ...hostile];
    const ts = inputs.map((t) => parsePctConfigGpuMinors(t));
    expect(perl(inputs.map((t) => ['minors', t] as [string, ...unknown[]]))).toEqual(ts);
    expect(ts.flat().length).toBeGreaterThan(4);
  });

  it("on each GPU's minor by UUID, from the real nvidia-smi -q -x captures", () => {
    const dir = join(FIXTURES, 'nvidia-smi', 'xml');
    const xmls = readdirSync(dir).map((f) => readFileSync(join(dir, f), 'utf8'));
    const ts = xmls.map((x) =>
      Object.fromEntries(
        parseXmlGpuMinors(x)
          .filter((g) => g.uuid !== null && g.minor !== null)
          .map((g) => [(g.uuid as string).toLowerCase(), g.minor]),
      ),
    );
    expect(perl(xmls.map((x) => ['xml', x] as [string, ...unknown[]]))).toEqual(ts);
    expect(ts.some((m) => Object.keys(m).length >= 2)).toBe(true);
  });
});
