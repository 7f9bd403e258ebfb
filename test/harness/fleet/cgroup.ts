/**
 * Puts a container's processes in a cgroup whose path contains `/lxc/<vmid>/`, as Proxmox does
 * (`/proc/<pid>/cgroup` → `0::/lxc/129/ns/...`), so membership by cgroup can be tested too.
 * Only the cgroup v2 hierarchy is used (no controllers are enabled or changed). Best effort:
 * where no writable v2 hierarchy exists, containers simply have none.
 * Node built-ins only: the fake pct and the container sshd starter use joinCgroup.
 */
import { type Dirent, existsSync, mkdirSync, readdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

const ROOTS = ['/sys/fs/cgroup/unified', '/sys/fs/cgroup'];

function v2Root(): string | null {
  for (const r of ROOTS) {
    // A v2 root has cgroup.procs but no per-controller v1 files like 'tasks'.
    if (
      existsSync(join(r, 'cgroup.procs')) &&
      !existsSync(join(r, 'tasks')) &&
      existsSync(join(r, 'cgroup.subtree_control'))
    )
      return r;
  }
  return null;
}

/** Creates `<v2root>/lxc/<vmid>/ns/<fleet dir name>`; null when cgroups can't be used here. */
export function createContainerCgroup(fleetDir: string, vmid: number): string | null {
  const root = v2Root();
  if (root === null) return null;
  const path = join(root, 'lxc', String(vmid), 'ns', basename(fleetDir));
  try {
    mkdirSync(path, { recursive: true });
    return path;
  } catch {
    return null;
  }
}

/** Moves the calling process into the cgroup (its children follow). */
export function joinCgroup(path: string | null): void {
  if (path === null) return;
  try {
    writeFileSync(join(path, 'cgroup.procs'), '0');
  } catch {
    // best effort: membership by cgroup is a nicety, PID namespaces are what matter
  }
}

/** Removes the cgroup and the now-empty `lxc/<vmid>/ns`, `lxc/<vmid>`, `lxc` parents (others may still use them). */
export function removeContainerCgroup(path: string | null): void {
  if (path === null) return;
  let p = path;
  for (let i = 0; i < 4; i++) {
    try {
      rmdirSync(p);
    } catch {
      return; // busy (processes or another fleet's cgroups) or gone
    }
    p = dirname(p);
  }
}

/** Removes `<hierarchy>/<rel>` and everything below it (empty cgroups), in every hierarchy. */
export function removeCgroupDirs(rel: string): void {
  let hierarchies: string[];
  try {
    hierarchies = readdirSync('/sys/fs/cgroup').map((h) => join('/sys/fs/cgroup', h));
  } catch {
    return;
  }
  const rmTree = (d: string) => {
    let entries: Dirent[] = [];
    try {
      entries = readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) if (e.isDirectory()) rmTree(join(d, e.name));
    try {
      rmdirSync(d);
    } catch {
      // busy or gone
    }
  };
  for (const h of [...hierarchies, '/sys/fs/cgroup']) {
    const top = join(h, rel);
    if (existsSync(top)) rmTree(top);
  }
}
