/** Closest candidate by edit distance, or null when nothing is reasonably close. Pure. */
export function closest(input: string, candidates: readonly string[]): string | null {
  const needle = input.toLowerCase();
  let best: string | null = null;
  let bestScore = Infinity;
  for (const c of candidates) {
    const d = editDistance(needle, c.toLowerCase());
    const score = c.toLowerCase().includes(needle) || needle.includes(c.toLowerCase()) ? Math.min(d, 1) : d;
    if (score < bestScore) {
      bestScore = score;
      best = c;
    }
  }
  const limit = Math.max(2, Math.floor(needle.length / 2));
  return best !== null && bestScore <= limit ? best : null;
}

export function editDistance(a: string, b: string): number {
  if (a.length > 64 || b.length > 64) return Math.max(a.length, b.length);
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      cur[j] = Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost);
    }
    prev = cur;
  }
  return prev[b.length] ?? 0;
}

/**
 * For destructive commands: the one candidate that `input` is a near-certain typo of, else null.
 * Near-certain = the same id but for letter case, or (ids of 5+ characters) the same id with two
 * adjacent non-digit characters swapped. Digits must match exactly (`ct999` is not `ct129`: digits
 * name a different container), and two fitting candidates give none. Pure.
 */
export function nearCertainTypo(input: string, candidates: readonly string[]): string | null {
  const a = input.toLowerCase();
  const fits = candidates.filter((c) => {
    const b = c.toLowerCase();
    if (a === b) return true;
    if (a.length !== b.length || a.length < 5) return false;
    const diff = [...a].flatMap((ch, i) => (ch === b[i] ? [] : [i]));
    const [i, j] = diff;
    return (
      diff.length === 2 &&
      i !== undefined &&
      j === i + 1 &&
      a[i] === b[j] &&
      a[j] === b[i] &&
      !/\d/.test(`${a[i]}${a[j]}`)
    );
  });
  return fits.length === 1 ? (fits[0] ?? null) : null;
}
