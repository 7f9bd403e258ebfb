/**
 * Every process a fleet starts is recorded (PID + start time) under <dir>/pids/, and the dir names
 * its owner (the test process). A fleet whose owner died without stop() is swept by the next
 * startFleet: its recorded PIDs are killed, and so is any process whose command line or
 * environment still names the fleet dir (sshd sessions, strays), then the dir is removed.
 * Mounts need no sweeping: every mount the fleet makes lives in a container's private mount
 * namespace, which disappears with the container's last process. Real LXC containers (the fleet's
 * `lxc.json`) are stopped with `lxc-stop -k` first, and the fleet's cgroup tree is removed.
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { removeContainerCgroup } from './cgroup.ts';
import { removeCgroupTree, stopAllLxc } from './lxc-container.ts';
import { procStartTime } from './state.ts';

export const FLEET_DIR_PREFIX = 'gpu-medic-fleet-';

export interface PidRecord {
  pid: number;
  startTime: number;
  role: string;
}

function selfIdentity(): PidRecord {
  return { pid: process.pid, startTime: procStartTime('/proc', process.pid) ?? 0, role: 'owner' };
}

export async function writeOwner(dir: string): Promise<void> {
  await writeFile(join(dir, 'owner.json'), `${JSON.stringify(selfIdentity())}\n`);
}

/** Records a started process; returns false if it is already gone. */
export function recordPid(dir: string, pid: number, role: string): boolean {
  const startTime = procStartTime('/proc', pid);
  if (startTime === null) return false;
  writeFileSync(join(dir, 'pids', `${pid}.json`), `${JSON.stringify({ pid, startTime, role } satisfies PidRecord)}\n`);
  return true;
}

export function recordedPids(dir: string): PidRecord[] {
  let names: string[];
  try {
    names = readdirSync(join(dir, 'pids'));
  } catch {
    return [];
  }
  const out: PidRecord[] = [];
  for (const n of names) {
    try {
      out.push(JSON.parse(readFileSync(join(dir, 'pids', n), 'utf8')) as PidRecord);
    } catch {
      // half-written record of a process that is gone anyway
    }
  }
  return out;
}

export function isSame(p: Pick<PidRecord, 'pid' | 'startTime'>): boolean {
  return procStartTime('/proc', p.pid) === p.startTime;
}

export function killQuietly(pid: number, signal: NodeJS.Signals = 'SIGKILL'): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

/** PIDs of live processes whose cmdline or environment mentions `needle` (not this process). */
export async function processesMentioning(needle: string): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid) continue;
    for (const file of ['cmdline', 'environ']) {
      try {
        if ((await readFile(`/proc/${name}/${file}`)).includes(needle)) {
          out.push(pid);
          break;
        }
      } catch {
        // gone, or a kernel thread
      }
    }
  }
  return out;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function waitGone(pids: number[], ms: number): Promise<number[]> {
  const until = Date.now() + ms;
  for (;;) {
    const left = pids.filter((p) => procStartTime('/proc', p) !== null);
    if (left.length === 0 || Date.now() > until) return left;
    await sleep(20);
  }
}

/**
 * Kills everything a fleet dir started: recorded PIDs, then anything still naming `needle`
 * (default `<dir>/m/`: the machines' PATH and config, which every sshd, session and fake tool carries).
 */
export async function killFleetProcesses(dir: string, needle = `${dir}/m/`): Promise<number[]> {
  const recorded = recordedPids(dir).filter(isSame);
  for (const p of recorded) killQuietly(p.pid);
  const stray = await processesMentioning(needle);
  for (const p of stray) killQuietly(p);
  return waitGone([...recorded.map((p) => p.pid), ...stray], 5000);
}

/** Removes the container cgroups a fleet recorded in <dir>/cgroups (after its processes are gone). */
export async function removeRecordedCgroups(dir: string): Promise<void> {
  let text = '';
  try {
    text = await readFile(join(dir, 'cgroups'), 'utf8');
  } catch {
    return;
  }
  for (const path of text.split('\n').filter((l) => l !== '')) removeContainerCgroup(path);
}

/** Removes the cgroup tree of a fleet's LXC containers (`lxc.json`), once they stopped. */
export async function removeLxcCgroups(dir: string): Promise<void> {
  const lxc = await readLxcRecord(dir);
  if (lxc !== null) removeCgroupTree(lxc.cgroupTag);
}

async function readLxcRecord(dir: string): Promise<{ lxcPath: string; cgroupTag: string } | null> {
  try {
    return JSON.parse(await readFile(join(dir, 'lxc.json'), 'utf8')) as { lxcPath: string; cgroupTag: string };
  } catch {
    return null;
  }
}

/** Sweeps fleets under /tmp whose owner process is gone. */
export async function sweepStaleFleets(root = '/tmp'): Promise<string[]> {
  const swept: string[] = [];
  for (const name of await readdir(root)) {
    if (!name.startsWith(FLEET_DIR_PREFIX)) continue;
    const dir = join(root, name);
    let owner: PidRecord;
    try {
      owner = JSON.parse(await readFile(join(dir, 'owner.json'), 'utf8')) as PidRecord;
    } catch {
      continue; // being created right now, or not ours
    }
    if (isSame(owner)) continue;
    const lxc = await readLxcRecord(dir);
    if (lxc !== null) await stopAllLxc(lxc.lxcPath); // their inits, monitors and cgroups go with them
    await killFleetProcesses(dir, `${dir}/`);
    await removeRecordedCgroups(dir);
    if (lxc !== null) removeCgroupTree(lxc.cgroupTag);
    await rm(dir, { recursive: true, force: true });
    swept.push(dir);
  }
  return swept;
}
