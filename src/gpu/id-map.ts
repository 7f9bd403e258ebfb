/**
 * A container's uid map as its Proxmox config says it (`pct config <vmid>`), and host uids read
 * back as the container's own. Pure, no I/O.
 *
 * - No `unprivileged: 1` and no `lxc.idmap` lines: privileged, no user namespace (host uid =
 *   container uid).
 * - `unprivileged: 1` with no `lxc.idmap` lines: Proxmox's default map, container uid 0 = host
 *   uid 100000, 65536 ids (pve-container adds it only then).
 * - `lxc.idmap: u <inside> <host> <count>` lines (`lxc.idmap = …` too): that map and nothing else;
 *   a host uid outside every range is not mapped (the container sees it as nobody).
 *
 * The shift is read, never assumed: other users of a machine may own 100000, so a host may give
 * a container any range.
 */

/** One `u <inside> <host> <count>` range: container uids inside … inside+count-1 are host uids host … */
export interface UidRange {
  inside: number;
  host: number;
  count: number;
}

export interface UidMap {
  /** `privileged`: no user namespace; `default`: Proxmox's default map; `custom`: `lxc.idmap` lines. */
  kind: 'privileged' | 'default' | 'custom';
  /** The uid ranges (empty when privileged). */
  ranges: UidRange[];
}

/** Proxmox's map for `unprivileged: 1` without `lxc.idmap` lines (pve-container, src/PVE/LXC.pm). */
const PROXMOX_DEFAULT_UID_RANGE: Readonly<UidRange> = { inside: 0, host: 100000, count: 65536 };

/** Ids are 32-bit; (uid_t)-1 is no id. */
const MAX_ID = 0xfffffffe;

/** Result of reading the map: the map, or why the config does not say one (a malformed `lxc.idmap` line). */
export type UidMapRead = { ok: true; map: UidMap } | { ok: false; reason: string };

/**
 * The uid map of `pct config <vmid>` output (or a `/etc/pve/lxc/<vmid>.conf`). Only the current
 * config counts: a `[snapshot]` section is not it. A malformed `lxc.idmap` line makes the map
 * unknown (no guess).
 */
export function parsePctUidMap(text: string): UidMapRead {
  let unprivileged = false;
  let idmapLines = 0;
  const ranges: UidRange[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('[')) break;
    const u = /^unprivileged:\s*(\S+)\s*$/.exec(line);
    if (u) {
      unprivileged = u[1] === '1';
      continue;
    }
    const m = /^lxc\.idmap\s*[:=]\s*(.*)$/.exec(line);
    if (!m) continue;
    idmapLines++;
    const words = (m[1] ?? '').trim().split(/\s+/);
    const nums = words.slice(1).map((w) => (/^\d{1,10}$/.test(w) ? Number(w) : null));
    const [inside, host, count] = nums;
    if (
      words.length !== 4 ||
      (words[0] !== 'u' && words[0] !== 'g') ||
      inside === null ||
      inside === undefined ||
      host === null ||
      host === undefined ||
      count === null ||
      count === undefined ||
      count === 0 ||
      inside + count - 1 > MAX_ID ||
      host + count - 1 > MAX_ID
    )
      return { ok: false, reason: `unreadable id map line \`${line.slice(0, 80)}\`` };
    if (words[0] === 'u') ranges.push({ inside, host, count });
  }
  if (idmapLines > 0) return { ok: true, map: { kind: 'custom', ranges } };
  if (unprivileged) return { ok: true, map: { kind: 'default', ranges: [{ ...PROXMOX_DEFAULT_UID_RANGE }] } };
  return { ok: true, map: { kind: 'privileged', ranges: [] } };
}

/** A host uid as the container knows it, or null when the map does not cover it. */
export function containerUidOf(map: UidMap, hostUid: number): number | null {
  if (!Number.isSafeInteger(hostUid) || hostUid < 0) return null;
  if (map.kind === 'privileged') return hostUid;
  for (const r of map.ranges) if (hostUid >= r.host && hostUid < r.host + r.count) return r.inside + (hostUid - r.host);
  return null;
}
