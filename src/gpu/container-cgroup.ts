/**
 * Container membership by cgroup, as Proxmox names a container's cgroups: `lxc/<vmid>` (its
 * processes in `lxc/<vmid>/ns`, the monitor in `lxc.monitor/<vmid>`; LXC's own default,
 * `lxc.payload.<name>`, is not Proxmox's and is not taken). Pure, no I/O.
 *
 * A PID namespace alone does not make a process the container's: a host root that `nsenter`s
 * into the container's PID namespace stays in the host's cgroup (and user namespace), and on a
 * shared machine other containers' processes show in the same host /proc. The worker treats a
 * host process as the container's only when both its PID namespace and its cgroup say so.
 */

/** `<hierarchy id>:<controllers>:<path>`, one per hierarchy (v2: `0::<path>`). */
const LINE = /^(\d+):([^:]*):(\/.*)$/;

/** The vmid of the first `lxc/<digits>` pair of a cgroup path (the outermost container), or null. */
function firstLxcVmid(path: string): number | null {
  const parts = path.split('/');
  for (let i = 0; i + 1 < parts.length; i++)
    if (parts[i] === 'lxc' && /^[1-9]\d{0,9}$/.test(parts[i + 1] ?? '')) return Number(parts[i + 1]);
  return null;
}

/**
 * True when `/proc/<pid>/cgroup` (read from the host) puts the process in container `vmid`: some
 * hierarchy's path names `lxc/<vmid>` as its outermost container, and none names another (a
 * cgroup called `lxc/129` made inside container 130 is 130's). Hierarchies where the process sits
 * at a path without a container (v1's `name=systemd` at `/`, an empty v2 `0::/`) are left aside.
 * Anything that is not a cgroup line makes the answer no.
 */
export function inContainerCgroup(cgroupText: string, vmid: number): boolean {
  let named = false;
  for (const raw of cgroupText.split('\n')) {
    if (raw === '') continue;
    const m = LINE.exec(raw);
    if (!m) return false;
    const v = firstLxcVmid(m[3] ?? '');
    if (v === null) continue;
    if (v !== vmid) return false;
    named = true;
  }
  return named;
}
