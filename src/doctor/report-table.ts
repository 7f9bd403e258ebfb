import type { CheckStatus, DoctorReport, Finding } from './judge.ts';

/** The doctor's table, pure: the same rows for the terminal and for Slack. */
export const TABLE_HEADER = ['Machine', 'Check', 'Result', 'Detail'] as const;

const MARK: Record<CheckStatus, string> = { ok: 'ok', warn: 'WARN', fail: 'FAIL', skip: '-' };

export function tableRows(findings: readonly Finding[]): string[][] {
  return findings.map((f) => [f.machineId, f.check, MARK[f.status], f.detail]);
}

/** One line per problem with its fix, failures first. */
export function hintLines(findings: readonly Finding[]): string[] {
  const problems = [...findings.filter((f) => f.status === 'fail'), ...findings.filter((f) => f.status === 'warn')];
  return problems
    .filter((f) => f.hint !== null)
    .map((f) => `${MARK[f.status]} ${f.machineId} ${f.check}: ${f.hint ?? ''}`);
}

export function summaryLine(r: DoctorReport, machines: number): string {
  if (r.failed === 0 && r.warned === 0) return `All checks passed on ${machines} machine${machines === 1 ? '' : 's'}.`;
  const parts = [
    r.failed > 0 ? `${r.failed} problem${r.failed === 1 ? '' : 's'} that would make unstick fail` : null,
    r.warned > 0 ? `${r.warned} warning${r.warned === 1 ? '' : 's'}` : null,
  ];
  return `${parts.filter((p) => p !== null).join(', ')} on ${machines} machine${machines === 1 ? '' : 's'}.`;
}

/** A plain fixed-width table for a terminal (no markup: this text is never sent to Slack). */
function textTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
  const line = (r: readonly string[]): string =>
    header
      .map((_, c) => (c === header.length - 1 ? (r[c] ?? '') : (r[c] ?? '').padEnd(widths[c] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/**
 * The fleet's agent rollout at a glance, so an operator sees where a stolen key would still open a shell: the
 * machines whose agent is older than this worker needs (or missing), and those whose key still opens a shell.
 * Empty when neither.
 */
export function agentLines(findings: readonly Finding[]): string[] {
  const older = findings
    .filter((f) => f.check === 'agent' && f.status === 'fail')
    .map((f) => {
      const v = /^gpu-medic-agent (\S+) is older/.exec(f.detail)?.[1];
      return v ? `${f.machineId} (${v})` : `${f.machineId} (none answered)`;
    });
  const forced = findings.filter((f) => f.check === 'forced key' && f.status === 'fail');
  const shell = forced.filter((f) => f.detail.startsWith('`true` ran')).map((f) => f.machineId);
  const notForced = forced.map((f) => f.machineId).filter((id) => !shell.includes(id));
  return [
    ...(older.length > 0 ? [`Agent older than this worker needs, or missing: ${older.join(', ')}`] : []),
    ...(shell.length > 0 ? [`Still allows a shell with the worker's key: ${shell.join(', ')}`] : []),
    ...(notForced.length > 0 ? [`Key not forced to the agent: ${notForced.join(', ')}`] : []),
  ];
}

/** Everything the CLI prints: table, fixes, the agent rollout, summary. */
export function reportText(r: DoctorReport, machines: number): string {
  const hints = hintLines(r.findings);
  const agents = agentLines(r.findings);
  return [
    textTable(TABLE_HEADER, tableRows(r.findings)),
    '',
    ...(hints.length > 0 ? ['How to fix:', ...hints.map((h) => `  ${h}`), ''] : []),
    ...(agents.length > 0 ? [...agents, ''] : []),
    summaryLine(r, machines),
    '',
  ].join('\n');
}
