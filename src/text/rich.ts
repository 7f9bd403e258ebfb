/**
 * Sentences gpu-medic composes around machine text (diagnoses, verdicts, advice), kept as DATA
 * until a renderer escapes them: a `Rich` is a list of parts, each a plain-words string, a
 * `{ code }` (a command, cmdline or machine id shown as code) or a `{ user }` (a Slack user id
 * gpu-medic itself mentions). Nothing in a Rich is markup; src/render/escape.ts `rich()` turns
 * each part into mrkdwn by its kind, once, and `richPlain()` gives the plain words (logs, CLI).
 *
 * Build one with the `say` tag: its literal text is gpu-medic's own words, where a pair of
 * backticks marks code; every interpolated value is data. A value inside backticks joins that
 * code part; a value outside is plain words; `user(id)` is a mention; a Rich value is spliced in.
 *
 *     say`${gpu}: denied by ${user(by)}; run \`/gpu unstick ${target}\` again (${stepMessage}).`
 *
 * Pure, no imports: the core (src/gpu, src/plan) may build Rich without depending on Slack.
 */

export type Part = string | { readonly code: string } | { readonly user: string };
export type Rich = readonly Part[];

export type SayValue = string | number | { readonly user: string } | Rich;

export function user(id: string): { readonly user: string } {
  return { user: id };
}

/** The plain words of a Rich (logs, CLI, the `nextStep` string): code in backticks, users as `<@ID>`. */
export function richPlain(parts: Rich): string {
  return parts.map((p) => (typeof p === 'string' ? p : 'code' in p ? `\`${p.code}\`` : `<@${p.user}>`)).join('');
}

function plainOf(v: SayValue): string {
  if (typeof v === 'number') return String(v);
  if (typeof v === 'string') return v;
  if (Array.isArray(v))
    return (v as Rich).map((p) => (typeof p === 'string' ? p : 'code' in p ? p.code : p.user)).join('');
  return (v as { user: string }).user;
}

/** Adjacent plain strings merged, empty strings dropped. */
function tidy(parts: Part[]): Part[] {
  const out: Part[] = [];
  for (const p of parts) {
    if (p === '') continue;
    const last = out[out.length - 1];
    if (typeof p === 'string' && typeof last === 'string') out[out.length - 1] = last + p;
    else out.push(p);
  }
  return out;
}

export function say(strings: TemplateStringsArray, ...values: SayValue[]): Part[] {
  const parts: Part[] = [];
  let code: string | null = null;
  strings.forEach((literal, i) => {
    const runs = literal.split('`');
    runs.forEach((run, j) => {
      if (j > 0) {
        // A backtick in gpu-medic's own words opens or closes a code part.
        if (code === null) code = '';
        else {
          parts.push({ code });
          code = null;
        }
      }
      if (code !== null) code += run;
      else parts.push(run);
    });
    if (i < values.length) {
      const v = values[i] as SayValue;
      if (code !== null) code += plainOf(v);
      else if (typeof v === 'string' || typeof v === 'number') parts.push(String(v));
      else if (Array.isArray(v)) parts.push(...(v as Rich));
      else parts.push(v as { user: string });
    }
  });
  if (code !== null) parts.push({ code });
  return tidy(parts);
}

/** Rich sentences joined with `sep` (plain words). */
export function joinRich(list: readonly Rich[], sep: string): Part[] {
  return tidy(list.flatMap((r, i) => (i === 0 ? [...r] : [sep, ...r])));
}
