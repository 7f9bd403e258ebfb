/** The test fleet: simulated Proxmox hosts and LXC containers built from real sshd, namespaces and processes. */
export { startFleet } from './start-fleet.ts';
export { nsPids, hostPidOf } from './proc-ns.ts';
export type {
  Fleet,
  FleetProcess,
} from './types.ts';
