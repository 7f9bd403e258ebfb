import { findMachine, hostRouteFor, type Machine, routeFor } from '../../src/config/machines.ts';
import type { Route } from '../../src/ssh/types.ts';
import type { UnstickWorkerDeps } from './deps.ts';

export type Container = Extract<Machine, { kind: 'container' }>;

export interface Target {
  container: Container;
  host: Machine;
  routes: { container: Route; host: Route };
  /** 0 when container commands run as root (`pct exec`, root login); null when unknown. */
  execUid: number | null;
}

export function resolveTarget(deps: UnstickWorkerDeps, machineId: string): Target | string {
  const m = findMachine(deps.inventory, machineId);
  if (!m) return `this worker's inventory has no machine "${machineId}"`;
  if (m.kind !== 'container')
    return `\`${machineId}\` is a host; unstick works on a container (its GPU holders and its host's view of them)`;
  const host = findMachine(deps.inventory, m.hostId);
  const container = routeFor(deps.inventory, m.id);
  const hostRoute = hostRouteFor(deps.inventory, m.hostId);
  if (!host || !container || !hostRoute)
    return `container \`${machineId}\` names host \`${m.hostId}\`, which this worker's inventory does not have`;
  const entry = deps.inventory.containers.find((c) => c.id === m.id);
  const user = container.kind === 'pct' ? 'root' : (entry?.user ?? deps.inventory.defaults.user);
  return { container: m, host, routes: { container, host: hostRoute }, execUid: user === 'root' ? 0 : null };
}
