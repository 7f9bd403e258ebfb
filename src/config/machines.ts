import type { Route, SshEndpoint } from '../ssh/types.ts';
import type { Inventory } from './inventory.ts';

export type Machine =
  | { kind: 'host'; id: string; site: string }
  | { kind: 'container'; id: string; site: string; vmid: number; hostId: string; ownAddress: boolean };

/** Every machine in inventory order: hosts first, then containers (which take their host's site). */
export function listMachines(inv: Inventory): Machine[] {
  const out: Machine[] = inv.hosts.map((h) => ({ kind: 'host', id: h.id, site: h.site }));
  for (const c of inv.containers) {
    const host = inv.hosts.find((h) => h.id === c.host);
    out.push({
      kind: 'container',
      id: c.id,
      site: host?.site ?? 'default',
      vmid: c.vmid,
      hostId: c.host,
      ownAddress: Boolean(c.address),
    });
  }
  return out;
}

/** Where a request about a machine acts, as the bot signs it: its Proxmox host, and its vmid for a container. */
export function requestWhere(m: Machine): { host: string; vmid: number | null } {
  return m.kind === 'container' ? { host: m.hostId, vmid: m.vmid } : { host: m.id, vmid: null };
}

export function findMachine(inv: Inventory, id: string): Machine | null {
  return listMachines(inv).find((m) => m.id === id) ?? null;
}

export function sitesOf(inv: Inventory): string[] {
  return [...new Set(inv.hosts.map((h) => h.site))].sort();
}

/** The SSH endpoint of an inventory entry with an address; user and key fall back to the defaults. */
function endpointOf(
  inv: Inventory,
  e: {
    id: string;
    address: string;
    port: number;
    user?: string | undefined;
    keyFile?: string | undefined;
    hostKeys?: string[] | undefined;
    access?: SshEndpoint['access'] | undefined;
  },
): SshEndpoint {
  return {
    ...(e.access === undefined ? {} : { access: e.access }),
    machineId: e.id,
    host: e.address,
    port: e.port,
    username: e.user ?? inv.defaults.user,
    privateKeyPath: e.keyFile ?? inv.defaults.keyFile ?? '',
    hostKeyFingerprints: e.hostKeys ?? [],
  };
}

/** The machine's own view: a host directly; a container by its own address, else `pct exec` on its host. */
export function routeFor(inv: Inventory, id: string): Route | null {
  const h = inv.hosts.find((x) => x.id === id);
  if (h) return { kind: 'direct', endpoint: endpointOf(inv, h) };
  const c = inv.containers.find((x) => x.id === id);
  if (!c) return null;
  if (c.address) return { kind: 'direct', endpoint: endpointOf(inv, { ...c, address: c.address }) };
  return hostRouteForContainer(inv, id);
}

/** The host-level route into a container: always `pct exec` on its Proxmox host. */
function hostRouteForContainer(inv: Inventory, id: string): Route | null {
  const c = inv.containers.find((x) => x.id === id);
  const h = c && inv.hosts.find((x) => x.id === c.host);
  if (!c || !h) return null;
  return { kind: 'pct', host: endpointOf(inv, h), vmid: c.vmid };
}

export function hostRouteFor(inv: Inventory, hostId: string): Route | null {
  const h = inv.hosts.find((x) => x.id === hostId);
  return h ? { kind: 'direct', endpoint: endpointOf(inv, h) } : null;
}
