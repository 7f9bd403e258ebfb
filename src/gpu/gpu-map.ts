import type { Gpu } from './types.ts';

/**
 * Which host GPU a container's GPU is, decided from the host's own view. A Proxmox container
 * usually sees only the GPUs passed to it, numbered from 0, while the host numbers them
 * differently; and whatever runs inside the container (its nvidia-smi included) is the
 * container's to change. So the host says which GPUs are the container's (its Proxmox config:
 * `devN: /dev/nvidiaM`, i.e. host device minors) and which GPU each minor is (host
 * `nvidia-smi -q -x`: `<minor_number>` per UUID); the container's own report only picks among
 * those, and must agree with the host on UUID and bus id. Pure.
 */

/** A host GPU's device minor (`/dev/nvidia<minor>`), as host `nvidia-smi -q -x` reports it. */
export interface GpuMinor {
  uuid: string | null;
  busId: string | null;
  minor: number | null;
}

/** What the host says the container was given. */
export interface GpuPassing {
  vmid: number;
  /** Host device minors the container's config passes to it; null when that could not be read. */
  minors: number[] | null;
  /** Why `minors` is null, in plain words. */
  problem: string | null;
  hostMinors: readonly GpuMinor[];
}

/** One container GPU matched to the host: the host's record of it, or why it could not be matched. */
export type GpuMatch = { host: Gpu; problem: null } | { host: null; problem: string };

function busKey(b: string | null): string | null {
  if (b === null) return null;
  const t = b.trim().toUpperCase();
  return /^[0-9A-F]{4}:/.test(t) && t.length === 12 ? `0000${t}` : t;
}

/** The host GPUs the container was given, by the host's own records; null when unknown. */
function passedHostGpus(hostGpus: readonly Gpu[], passing: GpuPassing): Gpu[] | null {
  if (passing.minors === null) return null;
  const out: Gpu[] = [];
  for (const m of passing.minors) {
    const rec = passing.hostMinors.find((x) => x.minor === m);
    const g = rec
      ? hostGpus.find(
          (h) =>
            (rec.uuid !== null && h.uuid === rec.uuid) ||
            (rec.uuid === null && rec.busId !== null && busKey(h.busId) === busKey(rec.busId)),
        )
      : undefined;
    if (g && !out.includes(g)) out.push(g);
  }
  return out;
}

/**
 * Per container GPU (same order as `containerGpus`): the host GPU it is. A container GPU is
 * matched only to a GPU the host passed to that container, with the UUID it claims, and its
 * bus id (when it reports one) must be the host's for that UUID. Anything else is unmatched,
 * with the reason: no host-side action may be taken on it.
 */
export function matchContainerGpus(
  containerGpus: readonly Gpu[],
  hostGpus: readonly Gpu[],
  passing: GpuPassing,
  hostId: string,
): GpuMatch[] {
  const where = { host: hostId, vmid: passing.vmid };
  const passed = passedHostGpus(hostGpus, passing);
  const claims = new Map<string, number>();
  for (const cg of containerGpus) if (cg.uuid !== null) claims.set(cg.uuid, (claims.get(cg.uuid) ?? 0) + 1);
  return containerGpus.map((cg): GpuMatch => {
    const label = `GPU ${cg.index ?? '?'}`;
    if (passed === null)
      return {
        host: null,
        problem: `which host GPU the container's ${label} is could not be told from ${where.host}'s own view: ${passing.problem ?? 'its configuration could not be read'}`,
      };
    if (cg.uuid === null)
      return {
        host: null,
        problem: `the container reports no UUID for ${label}, so it cannot be matched to a GPU ${where.host} passed to it`,
      };
    if ((claims.get(cg.uuid) ?? 0) > 1)
      return {
        host: null,
        problem: `the container reports ${cg.uuid} for more than one GPU, so ${label} cannot be matched`,
      };
    const hg = passed.find((g) => g.uuid === cg.uuid);
    if (hg === undefined)
      return {
        host: null,
        problem: `the container reports ${label} as ${cg.uuid}, which is not one of the GPUs ${where.host} passes to container ${where.vmid} (\`pct config ${where.vmid}\`: ${passed.length === 0 ? 'none' : passed.map((g) => `host GPU ${g.index ?? '?'}`).join(', ')})`,
      };
    if (cg.busId !== null && hg.busId !== null && busKey(cg.busId) !== busKey(hg.busId))
      return {
        host: null,
        problem: `the container reports ${label} (${cg.uuid}) at bus ${cg.busId}, but on ${where.host} that GPU is at ${hg.busId}`,
      };
    return { host: hg, problem: null };
  });
}
