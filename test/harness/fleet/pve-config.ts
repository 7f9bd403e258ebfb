/**
 * A container's Proxmox config, `<host>/pve/lxc/<vmid>.conf` (the fleet's `/etc/pve/lxc/`): what
 * `pct config` prints. Written as Proxmox writes it: `key: value` lines, then raw `lxc.*` lines
 * (a custom id map). `unprivileged: 1` with no `lxc.idmap` lines means Proxmox's default map
 * (container uid 0 = host uid 100000); a privileged container has no `unprivileged` key.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ContainerSpec } from './types.ts';

export function pveConfigPath(hostDir: string, vmid: number): string {
  return join(hostDir, 'pve', 'lxc', `${vmid}.conf`);
}

function pveConfigText(spec: ContainerSpec, hostGpuCount: number, realLxc: boolean): string {
  const gpus = spec.gpus ?? Array.from({ length: hostGpuCount }, (_, i) => i);
  const devs = [...gpus.map((i) => `/dev/nvidia${i}`), '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools'];
  // The namespace containers have always said unprivileged; a real LXC container says what it is.
  const unprivileged = !realLxc || spec.privileged !== true;
  const lines = [
    'arch: amd64',
    'cores: 32',
    ...devs.map((d, i) => `dev${i}: ${d}`),
    `hostname: ${spec.id}`,
    'memory: 460800',
    'net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:3A:01,ip=dhcp,type=veth',
    'ostype: ubuntu',
    `rootfs: local-zfs:subvol-${spec.vmid}-disk-0,size=500G`,
    'swap: 0',
    ...(unprivileged ? ['unprivileged: 1'] : []),
    ...(realLxc && spec.idmapBase !== undefined && spec.privileged !== true
      ? [`lxc.idmap: u 0 ${spec.idmapBase} 65536`, `lxc.idmap: g 0 ${spec.idmapBase} 65536`]
      : []),
  ];
  return `${lines.join('\n')}\n`;
}

export async function writePveConfig(
  hostDir: string,
  spec: ContainerSpec,
  hostGpuCount: number,
  realLxc: boolean,
): Promise<void> {
  await mkdir(join(hostDir, 'pve', 'lxc'), { recursive: true });
  await writeFile(pveConfigPath(hostDir, spec.vmid), pveConfigText(spec, hostGpuCount, realLxc));
}
