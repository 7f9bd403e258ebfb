/**
 * Cutting a list into batches that each fit one Slack message, pure and without imports, so the
 * planner (src/plan) can use it without depending on the renderers: it passes `fits`, which
 * the caller builds from src/render/unstick.ts `approvalCardFits`.
 */

/**
 * Splits targets into batches that each fit one approval card (`fits` says whether a batch does,
 * e.g. by planning its step and calling `approvalCardFits`): the whole list if it fits; else one
 * batch per GPU (by the first GPU a target holds), neighbouring GPUs merged while they fit; a GPU
 * whose targets alone do not fit is cut into consecutive runs. Every target lands in exactly one
 * batch, in input order within it. Pure.
 */
export function splitForCards<T extends { gpus: ReadonlyArray<{ index: number | null; uuid: string | null }> }>(
  targets: readonly T[],
  fits: (batch: readonly T[]) => boolean,
): T[][] {
  if (targets.length === 0) return [];
  if (fits(targets)) return [[...targets]];
  const groups = new Map<string, T[]>();
  for (const t of targets) {
    const g = t.gpus[0];
    const key = g ? (g.uuid ?? `index:${g.index ?? '?'}`) : 'none';
    groups.set(key, [...(groups.get(key) ?? []), t]);
  }
  const runs: T[][] = [];
  for (const group of groups.values()) {
    if (fits(group)) {
      runs.push(group);
      continue;
    }
    let cur: T[] = [];
    for (const t of group) {
      if (cur.length > 0 && !fits([...cur, t])) {
        runs.push(cur);
        cur = [];
      }
      cur.push(t);
    }
    if (cur.length > 0) runs.push(cur);
  }
  const out: T[][] = [];
  for (const run of runs) {
    const last = out[out.length - 1];
    if (last && fits([...last, ...run])) out[out.length - 1] = [...last, ...run];
    else out.push(run);
  }
  return out;
}
