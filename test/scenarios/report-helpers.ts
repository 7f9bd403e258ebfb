/** Helpers shared by the scenario tests: locating files, reading tables and incidents out of a report. */
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import type { IncidentReport, Report } from './run-scenario.ts';

export const HERE = dirname(fileURLToPath(import.meta.url));
export const FILES = readdirSync(HERE)
  .filter((f) => /\.ya?ml$/.test(f))
  .sort();

export const file = (prefix: string): string => {
  const f = FILES.find((x) => x.startsWith(prefix));
  if (!f) throw new Error(`no scenario file ${prefix}*`);
  return join(HERE, f);
};

/** Cell texts of the table block in a message (header row first). */
export function tableRows(blocks: unknown[] | null): string[][] {
  const table = (blocks ?? []).find(
    (b): b is { type: 'table'; rows: Array<Array<{ text?: string }>> } =>
      typeof b === 'object' && b !== null && (b as { type?: unknown }).type === 'table',
  );
  return (table?.rows ?? []).map((r) => r.map((c) => c.text ?? ''));
}

export const byLabel = (r: Report, label: string): IncidentReport => {
  const i = r.incidents.find((x) => x.label === label);
  if (!i) throw new Error(`no incident labelled ${label}; have ${r.incidents.map((x) => x.label).join(', ')}`);
  return i;
};

/** Ms from the incident's `requested` event to the event that completed it. */
export const timeToFinish = (inc: IncidentReport): number => inc.durationMs ?? Number.POSITIVE_INFINITY;

/** The run worked, every step did what it says, every incident finished, and the file's own expect block holds. */
export function expectRunClean(r: Report): void {
  expect(r.broken).toBeNull();
  expect(r.steps.filter((s) => s.problem !== null).map((s) => `${s.index}: ${s.problem}`)).toEqual([]);
  expect(r.unfinished).toEqual([]);
  expect(r.expectations.filter((e) => !e.ok).map((e) => `${e.check}: ${e.detail}`)).toEqual([]);
}
