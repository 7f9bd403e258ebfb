/**
 * A container's uid map read from its Proxmox config (`pct config <vmid>`), and host uids read
 * back as the container's own (src/gpu/id-map.ts). Config texts in the form `pct config` prints.
 */
import { describe, expect, it } from 'vitest';
import { containerUidOf, parsePctUidMap, type UidMap } from '../../src/gpu/id-map.ts';

const BASE = ['arch: amd64', 'cores: 32', 'dev0: /dev/nvidia0', 'hostname: ct129', 'memory: 460800'];
const config = (...lines: string[]): string => `${[...BASE, ...lines].join('\n')}\n`;

function mapOf(text: string): UidMap {
  const r = parsePctUidMap(text);
  if (!r.ok) throw new Error(r.reason);
  return r.map;
}

describe('parsePctUidMap', () => {
  it('unprivileged: 1 without lxc.idmap lines is the default map: container 0..65535 = host 100000..165535', () => {
    const m = mapOf(config('swap: 0', 'unprivileged: 1'));
    expect(m).toEqual({ kind: 'default', ranges: [{ inside: 0, host: 100000, count: 65536 }] });
    expect([100000, 101001, 165535, 165536, 99999, 0].map((u) => containerUidOf(m, u))).toEqual([
      0,
      1001,
      65535,
      null,
      null,
      null,
    ]);
  });

  it('lxc.idmap lines are the map and nothing else (a container with its own base: 200000)', () => {
    const m = mapOf(config('unprivileged: 1', 'lxc.idmap: u 0 200000 65536', 'lxc.idmap: g 0 200000 65536'));
    expect(m).toEqual({ kind: 'custom', ranges: [{ inside: 0, host: 200000, count: 65536 }] });
    expect(containerUidOf(m, 200000)).toBe(0);
    expect(containerUidOf(m, 201001)).toBe(1001);
    // The default shift is not assumed beside a custom map.
    expect(containerUidOf(m, 100000)).toBeNull();
  });

  it('several u ranges (one host uid passed through as itself), g lines not taken as uids', () => {
    const m = mapOf(
      config(
        'unprivileged: 1',
        'lxc.idmap: u 0 100000 1005',
        'lxc.idmap: g 0 100000 1005',
        'lxc.idmap: u 1005 1005 1',
        'lxc.idmap: g 1005 1005 1',
        'lxc.idmap: u 1006 101006 64530',
        'lxc.idmap: g 1006 300000 64530',
      ),
    );
    expect(m.ranges).toEqual([
      { inside: 0, host: 100000, count: 1005 },
      { inside: 1005, host: 1005, count: 1 },
      { inside: 1006, host: 101006, count: 64530 },
    ]);
    expect([100000, 101004, 1005, 101005, 101006, 165535, 300000].map((u) => containerUidOf(m, u))).toEqual([
      0,
      1004,
      1005,
      null,
      1006,
      65535,
      null,
    ]);
  });

  it('LXC’s own `lxc.idmap = …` spelling is read too', () => {
    expect(mapOf('unprivileged: 1\nlxc.idmap = u 0 300000 65536\n').ranges).toEqual([
      { inside: 0, host: 300000, count: 65536 },
    ]);
  });

  it('no unprivileged key: privileged, host uid = container uid', () => {
    const m = mapOf(config('swap: 0'));
    expect(m.kind).toBe('privileged');
    expect(containerUidOf(m, 0)).toBe(0);
    expect(containerUidOf(m, 1001)).toBe(1001);
    expect(mapOf(config('unprivileged: 0')).kind).toBe('privileged');
  });

  it('only the current config counts, not a [snapshot] section', () => {
    const text = `${config('unprivileged: 1')}\n[before-upgrade]\nlxc.idmap: u 0 500000 65536\nunprivileged: 0\n`;
    expect(mapOf(text)).toEqual({ kind: 'default', ranges: [{ inside: 0, host: 100000, count: 65536 }] });
  });

  it('a malformed lxc.idmap line makes the map unknown, not a guess', () => {
    for (const bad of [
      'lxc.idmap: u 0 100000',
      'lxc.idmap: x 0 100000 65536',
      'lxc.idmap: u 0 1e5 65536',
      'lxc.idmap: u 0 100000 0',
    ])
      expect(parsePctUidMap(config('unprivileged: 1', bad))).toMatchObject({ ok: false });
  });
});
