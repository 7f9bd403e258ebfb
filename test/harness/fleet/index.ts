/** The test fleet: simulated Proxmox hosts and LXC containers built from real sshd, namespaces and processes. */
export { startFleet } from './start-fleet.ts';
export { sweepStaleFleets } from './registry.ts';
export { nsPids, hostPidOf } from './proc-ns.ts';
export type {
  CommandLogEntry,
  ContainerSpec,
  Fleet,
  FleetOptions,
  FleetProcess,
  FleetSpec,
  GpuMemoryReading,
  GpuSpec,
  HolderOptions,
  HostSpec,
  MachineView,
  SignalRecord,
  SpawnOptions,
} from './types.ts';
