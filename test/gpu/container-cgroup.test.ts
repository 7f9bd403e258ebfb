/**
 * Whether a host process belongs to a container by its cgroup (`/proc/<pid>/cgroup` as the host
 * reads it): Proxmox puts a container's processes under `lxc/<vmid>` (src/gpu/container-cgroup.ts).
 */
import { describe, expect, it } from 'vitest';
import { inContainerCgroup } from '../../src/gpu/container-cgroup.ts';

describe('inContainerCgroup', () => {
  it('Proxmox on cgroup v2: 0::/lxc/<vmid>/ns, also a unit of the container’s own systemd below it', () => {
    expect(inContainerCgroup('0::/lxc/129/ns\n', 129)).toBe(true);
    expect(inContainerCgroup('0::/lxc/129/ns/system.slice/sglang.service\n', 129)).toBe(true);
    expect(inContainerCgroup('0::/lxc/129\n', 129)).toBe(true);
  });

  it('another container, a vmid that only starts alike, the monitor, and the host are not it', () => {
    expect(inContainerCgroup('0::/lxc/130/ns\n', 129)).toBe(false);
    expect(inContainerCgroup('0::/lxc/1290/ns\n', 129)).toBe(false);
    expect(inContainerCgroup('0::/lxc.monitor/129\n', 129)).toBe(false);
    expect(inContainerCgroup('0::/user.slice/user-0.slice/session-3.scope\n', 129)).toBe(false);
    expect(inContainerCgroup('0::/\n', 129)).toBe(false);
    expect(inContainerCgroup('', 129)).toBe(false);
  });

  it('a cgroup named lxc/<vmid> made inside another container (nesting) belongs to that other one', () => {
    expect(inContainerCgroup('0::/lxc/130/ns/lxc/129/ns\n', 129)).toBe(false);
    expect(inContainerCgroup('0::/lxc/130/ns/lxc/129/ns\n', 130)).toBe(true);
  });

  it('cgroup v1 (the fleet here): every hierarchy under a first component, root-only ones left aside', () => {
    const v1 = [
      '12:pids:/gpu-medic-ab12/lxc/129/ns',
      '11:memory:/gpu-medic-ab12/lxc/129/ns',
      '2:cpu,cpuacct:/gpu-medic-ab12/lxc/129/ns',
      '1:name=systemd:/',
      '0::/',
    ].join('\n');
    expect(inContainerCgroup(`${v1}\n`, 129)).toBe(true);
    expect(inContainerCgroup(`${v1}\n`, 130)).toBe(false);
  });

  it('hierarchies that name two containers are neither', () => {
    const mixed = '12:pids:/lxc/129/ns\n11:memory:/lxc/130/ns\n';
    expect(inContainerCgroup(mixed, 129)).toBe(false);
    expect(inContainerCgroup(mixed, 130)).toBe(false);
  });

  it('a line that is not `<id>:<controllers>:<path>` makes the answer no', () => {
    expect(inContainerCgroup('0::/lxc/129/ns\n@cgroup 0::/lxc/129/ns\n', 129)).toBe(false);
    expect(inContainerCgroup('lxc/129/ns\n', 129)).toBe(false);
  });
});
