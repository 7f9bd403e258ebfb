/**
 * A Proxmox container as real Linux namespaces: `unshare --pid --fork --mount --uts` runs a setup
 * script as the new PID 1, which
 *   - bind-mounts the host's /proc at <ct>/hostproc BEFORE mounting its own /proc (a proc mount
 *     shows the PID namespace of whoever mounted it), so the fake nvidia-smi inside can still
 *     check the liveness of every holder on the host by host PID;
 *   - puts a private tmpfs on /dev with the basic nodes, and bind-mounts the host's device files
 *     onto /dev/nvidia* (only the GPUs passed to it, under their host names, as Proxmox `devN:`
 *     does), so real `fuser -v /dev/nvidia*` prints `kernel mount` rows, as in LXC;
 *   - bind-mounts its own bin/ over the host's bin/ path: `pct exec` keeps the host's PATH, and
 *     finds the container's tools there, as it finds the container rootfs' binaries on Proxmox;
 *     likewise its sys/ (system PATH minus the programs it lacks) over the host's, when they have one;
 *   - mounts its /proc with hidepid=invisible when asked (`hideProc`);
 *   - joins the container's cgroup (`/lxc/<vmid>/...`, see cgroup.ts), sets the hostname and execs the fleet program as `/sbin/init` (reaps orphans).
 * All mounts live in the container's private mount namespace: they vanish with its last process.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { shellQuote } from '../../../src/text/shell-quote.ts';
import type { FleetTools } from './build-tools.ts';
import { spawnReady } from './spawn-ready.ts';

export interface RunningContainer {
  /** The process that started it and lives as long as it does (unshare, or lxc-start's shell). */
  launcherPid: number;
  initHostPid: number;
  initStartTime: number;
  exited: Promise<{ code: number | null; signal: string | null }>;
}

/** Environment of the container's PID 1 beyond FLEET_MODE (a GPU-holding init: FLEET_DEVS, FLEET_ARGV, ...). */
export type InitEnv = Record<string, string>;

function setupScript(o: {
  ctDir: string;
  hostDir: string;
  hostname: string;
  holder: string;
  cgroup: string | null;
  hideProc: boolean;
  systemPath: boolean;
  gpus: number[] | null;
  initEnv?: InitEnv;
}): string {
  const q = shellQuote;
  const initEnv = { FLEET_ARGV: '/sbin/init', ...(o.initEnv ?? {}) };
  const envWords = Object.entries(initEnv)
    .map(([k, v]) => `${k}=${q(v)}`)
    .join(' ');
  return `#!/bin/bash
set -euo pipefail
${o.cgroup === null ? '' : `echo 0 > ${q(join(o.cgroup, 'cgroup.procs'))} || true`}
CT=${q(o.ctDir)}
HOSTDIR=${q(o.hostDir)}
mount --bind /proc "$CT/hostproc"
mount -t proc ${o.hideProc ? '-o hidepid=invisible ' : ''}proc /proc
mount --rbind /dev "$CT/hostdev"
mount -t tmpfs -o mode=755,size=1m ctdev /dev
for n in null zero full random urandom tty ptmx; do
  touch "/dev/$n"; mount --bind "$CT/hostdev/$n" "/dev/$n"
done
mkdir /dev/pts /dev/shm
mount --rbind "$CT/hostdev/pts" /dev/pts
mount --rbind "$CT/hostdev/shm" /dev/shm
ln -s /proc/self/fd /dev/fd; ln -s /proc/self/fd/0 /dev/stdin; ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
for f in "$HOSTDIR"/dev/*; do
  n=$(basename "$f")
  ${o.gpus === null ? '' : `case "$n" in nvidia[0-9]*) case " ${o.gpus.map((g) => `nvidia${g}`).join(' ')} " in *" $n "*) ;; *) continue ;; esac ;; esac`}
  touch "/dev/$n"; mount --bind "$f" "/dev/$n"
done
umount -R "$CT/hostdev"
mount --bind "$CT/bin" "$HOSTDIR/bin"
${o.systemPath ? 'mount --bind "$CT/sys" "$HOSTDIR/sys"' : ''}
hostname ${q(o.hostname)}
# Our host PID and start time: the redirection is done by bash itself, so "self" is this process.
read -r -a F < "$CT/hostproc/self/stat"
echo "READY \${F[0]} \${F[21]}"
exec env FLEET_MODE=init ${envWords} ${q(o.holder)}
`;
}

export async function startContainer(o: {
  ctDir: string;
  hostDir: string;
  hostname: string;
  tools: FleetTools;
  cgroup: string | null;
  /** Mount its /proc with hidepid=invisible. */
  hideProc?: boolean;
  /** It and its host have a sys/ dir (a PATH without some programs): bind its own over the host's. */
  systemPath?: boolean;
  /** Host GPU indices whose device files it gets (null: all), as Proxmox `devN: /dev/nvidiaM` passes them. */
  gpus?: number[] | null;
  initEnv?: InitEnv;
}): Promise<RunningContainer> {
  const script = join(o.ctDir, 'setup.sh');
  await writeFile(
    script,
    setupScript({
      ...o,
      holder: o.tools.holder,
      hideProc: o.hideProc === true,
      systemPath: o.systemPath === true,
      gpus: o.gpus ?? null,
    }),
    { mode: 0o755 },
  );
  const r = await spawnReady(
    'unshare',
    ['--pid', '--fork', '--mount', '--uts', '--propagation', 'private', '--', '/bin/bash', script],
    { env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' }, stderrPath: join(o.ctDir, 'init.log') },
  );
  const m = /^READY (\d+) (\d+)$/.exec(r.line);
  if (m === null || r.child.pid === undefined)
    throw new Error(`container ${o.hostname}: bad ready line ${JSON.stringify(r.line)}`);
  return { launcherPid: r.child.pid, initHostPid: Number(m[1]), initStartTime: Number(m[2]), exited: r.exited };
}

/** Argv prefix that runs a command inside the container (what `pct exec` does). */
export function nsenterArgs(initHostPid: number): string[] {
  return ['--target', String(initHostPid), '--pid', '--mount', '--uts', '--'];
}
