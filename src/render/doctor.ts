import type { types } from '@slack/bolt';
import { agentLines, hintLines, summaryLine, TABLE_HEADER, tableRows } from '../doctor/report-table.ts';
import type { Finding } from '../doctor/judge.ts';
import type { IncidentMeta, LoggedEvent } from '../incident/events.ts';
import { fallbackText, limitBlocks, sectionsOf } from './blocks.ts';
import { code, mention, text } from './escape.ts';
import { parentView, type MessageView } from './status.ts';
import { buildTableBlock, monospaceTable } from './table-block.ts';

type KnownBlock = types.KnownBlock;

/**
 * `/gpu doctor`'s thread, pure: the parent's state line, then the same table as `gpu-medic doctor`
 * (Machine, Check, Result, Detail) and one fix per problem. Details come from machines: they
 * reach Slack only through the table cells (plain text) and `text()`.
 */
export function renderDoctor(meta: IncidentMeta, events: readonly LoggedEvent[]): MessageView[] {
  const reports = events.filter(
    (e): e is Extract<LoggedEvent, { type: 'doctor_report' }> => e.type === 'doctor_report',
  );
  const errors = events.filter((e): e is Extract<LoggedEvent, { type: 'error' }> => e.type === 'error');
  const findings: Finding[] = reports.flatMap((r) => r.findings);
  const checked = new Set(reports.flatMap((r) => r.machines));
  const done =
    events.some((e) => e.type === 'finished') && meta.targets.every((t) => checked.has(t) || errors.length > 0);
  const failed = findings.filter((f) => f.status === 'fail').length;
  const warned = findings.filter((f) => f.status === 'warn').length;
  const what = meta.targets.length === 1 ? code(meta.targets[0] ?? '') : `all machines (${meta.targets.length})`;
  const state = !done
    ? ':hourglass_flowing_right: checking…'
    : failed === 0 && warned === 0 && errors.length === 0
      ? `:white_check_mark: ${summaryLine({ findings, failed, warned }, checked.size)}`
      : `:warning: ${summaryLine({ findings, failed, warned }, checked.size)}${errors.length > 0 ? ` ${errors.length} error${errors.length === 1 ? '' : 's'} below.` : ''}`;
  const parentText = `:stethoscope: Doctor for ${what}, requested by ${mention(meta.requester)} · ${state}`;
  const views: MessageView[] = [
    parentView(parentText, `incident ${code(meta.id)} · read-only: nothing was signalled or reset`),
  ];
  if (reports.length > 0) {
    const rows = tableRows(findings);
    const hints = [...hintLines(findings), ...agentLines(findings)].map(text);
    const heading = `*Checks on ${checked.size} machine${checked.size === 1 ? '' : 's'}*`;
    const table = buildTableBlock(TABLE_HEADER, rows);
    const more =
      table.omittedRows > 0
        ? [
            `${table.omittedRows} more rows are not shown here: run \`gpu-medic doctor\` where the worker runs for the whole table.`,
          ]
        : [];
    const blocks: KnownBlock[] = [
      { type: 'section', text: { type: 'mrkdwn', text: heading } },
      table.block,
      ...sectionsOf([...(hints.length > 0 ? ['*How to fix:*', ...hints] : []), ...more]),
    ];
    views.push({
      key: 'report',
      placement: 'reply',
      text: fallbackText([
        heading,
        monospaceTable(TABLE_HEADER, rows),
        ...(hints.length > 0 ? ['How to fix:', ...hints] : []),
        ...more,
      ]),
      blocks: limitBlocks(blocks),
    });
  }
  for (const e of errors) {
    const t = `:warning: ${text(e.message)} (${text(e.code)}). Those machines were not checked.`;
    views.push({
      key: `ev:${e.id}`,
      placement: 'reply',
      text: t,
      blocks: [{ type: 'section', text: { type: 'mrkdwn', text: t } }],
    });
  }
  return views;
}
