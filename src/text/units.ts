/**
 * The one place that writes numbers with their units for people to read: counts, MiB, seconds,
 * durations and "n things". Pure, no imports: the core (src/gpu, src/unstick-runner, src/watchdog)
 * words its sentences with these as well as the renderers in src/render/.
 *
 * Every number is written in en-US grouping (`12,345`), whatever the machine's locale, so a card,
 * a log line and a test read the same everywhere. Unknown values (`null`) are written `?`.
 *
 * - `count(n)`: `12,345`; `null` → `?`. Keeps up to three decimals as toLocaleString does.
 * - `countRounded(n)`: `12,346` for 12,345.6: rounded to a whole number first (percentages,
 *   GiB, MiB computed by division).
 * - `mib(n, unknown = '?')`: `12,345 MiB`; `null` → `unknown` (`?`, or `? MiB` where the sentence
 *   needs the unit said).
 * - `seconds(ms)`: `90.0 s`, one decimal (step timings, timelines).
 * - `wholeSeconds(ms)`: `90 s` (waits and grace periods said in a plan).
 * - `duration(ms)`: `90.0 s` under a minute, `2 min 5 s` from a minute on; `unknown` when the
 *   value is negative or not a number (a report's durations computed from stored times).
 * - `noun(n, one, many)`: the word alone, singular for exactly 1.
 * - `plural(n, one, many = one + 's')`: `count(n)` and the word: `1 machine`, `1,200 machines`.
 *
 * Escaping is not done here: the results are digits, separators and fixed words, and text that
 * comes from machines goes through src/render/escape.ts as before.
 */

/** `12,345`; `null` → `?`. */
export function count(n: number | null): string {
  return n === null ? '?' : n.toLocaleString('en-US');
}

/** Rounded to a whole number, then `12,345`. */
export function countRounded(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** `12,345 MiB`; `null` → `unknown`. */
export function mib(n: number | null, unknown = '?'): string {
  return n === null ? unknown : `${count(n)} MiB`;
}

/** `90.0 s`: milliseconds as seconds with one decimal. */
export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/** `90 s`: milliseconds as whole seconds. */
export function wholeSeconds(ms: number): string {
  return `${Math.round(ms / 1000)} s`;
}

/** `90.0 s` under a minute, `2 min 5 s` from a minute on, `unknown` for a negative or non-finite value. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return 'unknown';
  if (ms < 60_000) return seconds(ms);
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/** The word for `n` things: `one` for exactly 1, else `many`. */
export function noun(n: number, one: string, many = `${one}s`): string {
  return n === 1 ? one : many;
}

/** `1 machine`, `1,200 machines`. */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${count(n)} ${noun(n, one, many)}`;
}
