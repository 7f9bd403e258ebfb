/** The numbers the fault suite reports: CI asserts on them, `npm run soak` prints them. */
export interface Figures {
  /** Scenario runs (one per stack/scenario pass). */
  runs: number;
  /** Faults injected: Redis stops, Slack 429/5xx/outages, SSH faults, forged/replayed/tampered requests. */
  faultsInjected: number;
  /** A kill (SIGTERM/SIGKILL) delivered twice to one process by gpu-medic (counted by the crash runs). */
  killsExecutedTwice: number;
  /** Signals a process received that is not a GPU holder of the run's target (counted by the crash runs; must be 0). */
  signalsOutsideBound: number;
  /** Acknowledged incidents whose expected events never reached the log. */
  eventsLost: number;
  /** Thread messages expected in Slack and missing, duplicated or out of order. */
  messagesLost: number;
  /** Hostile or malformed inputs sent (fuzz cases, forged requests, tampered clicks). */
  badInputsTried: number;
  /** Hostile inputs after which a command outside the fixed templates reached a machine's shell. */
  badInputsReachedShell: number;
  /** Every slash-command ack time measured (ms). */
  ackMs: number[];
  /** Time from a fault's end (Redis back, Slack back) until everything owed was delivered (ms). */
  recoverMs: number[];
  /** Problems found (each a readable sentence); CI fails on any. */
  failures: string[];
}

export function emptyFigures(): Figures {
  return {
    runs: 0,
    faultsInjected: 0,
    killsExecutedTwice: 0,
    signalsOutsideBound: 0,
    eventsLost: 0,
    messagesLost: 0,
    badInputsTried: 0,
    badInputsReachedShell: 0,
    ackMs: [],
    recoverMs: [],
    failures: [],
  };
}

export function mergeFigures(a: Figures, b: Figures): Figures {
  return {
    runs: a.runs + b.runs,
    faultsInjected: a.faultsInjected + b.faultsInjected,
    killsExecutedTwice: a.killsExecutedTwice + b.killsExecutedTwice,
    signalsOutsideBound: a.signalsOutsideBound + b.signalsOutsideBound,
    eventsLost: a.eventsLost + b.eventsLost,
    messagesLost: a.messagesLost + b.messagesLost,
    badInputsTried: a.badInputsTried + b.badInputsTried,
    badInputsReachedShell: a.badInputsReachedShell + b.badInputsReachedShell,
    ackMs: a.ackMs.concat(b.ackMs),
    recoverMs: a.recoverMs.concat(b.recoverMs),
    failures: a.failures.concat(b.failures),
  };
}

/** Nearest-rank percentile; NaN for no samples. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((x, y) => x - y);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1] ?? Number.NaN;
}

/** One line per scenario plus a total, as a fixed-width text table. */
export function figuresTable(rows: Array<{ name: string; f: Figures; seconds: number }>): string {
  const head = [
    'scenario',
    'runs',
    'faults injected',
    'kills twice',
    'signals outside bound',
    'events lost',
    'messages lost',
    'bad inputs tried',
    'bad inputs → shell',
    'ack p50 ms',
    'ack p99 ms',
    'recover max s',
    'failures',
    'time s',
  ];
  const fmt = (n: number): string => (Number.isNaN(n) ? '-' : String(Math.round(n)));
  const line = (name: string, f: Figures, seconds: number): string[] => [
    name,
    String(f.runs),
    String(f.faultsInjected),
    String(f.killsExecutedTwice),
    String(f.signalsOutsideBound),
    String(f.eventsLost),
    String(f.messagesLost),
    String(f.badInputsTried),
    String(f.badInputsReachedShell),
    fmt(percentile(f.ackMs, 50)),
    fmt(percentile(f.ackMs, 99)),
    f.recoverMs.length === 0 ? '-' : (Math.max(...f.recoverMs) / 1000).toFixed(1),
    String(f.failures.length),
    seconds.toFixed(1),
  ];
  const total = rows.reduce((acc, r) => mergeFigures(acc, r.f), emptyFigures());
  const body = [
    ...rows.map((r) => line(r.name, r.f, r.seconds)),
    line(
      'TOTAL',
      total,
      rows.reduce((s, r) => s + r.seconds, 0),
    ),
  ];
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((r) => (r[i] ?? '').length)));
  const row = (cells: string[]): string =>
    `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join(' | ')} |`;
  const sep = `|${widths.map((w, i) => (i === 0 ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [row(head), sep, ...body.map(row)].join('\n');
}

/** Collects failures instead of throwing, so a soak run reports all of them at once. */
export function checker(f: Figures): (ok: boolean, what: string) => boolean {
  return (ok, what) => {
    if (!ok) f.failures.push(what);
    return ok;
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until it returns a truthy value or `timeoutMs` passes (then null). Bounded. */
export async function pollUntil<T>(
  fn: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  timeoutMs: number,
  everyMs = 50,
): Promise<T | null> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) return null;
    await sleep(everyMs);
  }
}
