/** Small statistics for the benchmark: nearest-rank percentiles and run summaries. */

export interface Summary {
  median: number;
  min: number;
  max: number;
  runs: number;
}

/** Nearest-rank percentile (p in 0..100) of a non-empty sample. */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) throw new Error('percentile of an empty sample');
  const s = [...xs].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * s.length));
  return s[Math.min(s.length, rank) - 1] as number;
}

function median(xs: readonly number[]): number {
  if (xs.length === 0) throw new Error('median of an empty sample');
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

export function round(x: number, digits = 0): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Median, min and max of one figure over its measured runs (warm-up already left out). */
export function summarize(xs: readonly number[], digits = 0): Summary {
  return {
    median: round(median(xs), digits),
    min: round(Math.min(...xs), digits),
    max: round(Math.max(...xs), digits),
    runs: xs.length,
  };
}

/** ours / baseline of the medians, two decimals; null when the baseline is 0. */
export function ratio(ours: readonly number[], baseline: readonly number[]): number | null {
  const b = median(baseline);
  return b === 0 ? null : round(median(ours) / b, 2);
}
