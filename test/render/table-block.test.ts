import { silentSlackLogger } from '../harness/slack/silent-logger.ts';
import type { types } from '@slack/bolt';
import { WebClient } from '@slack/web-api';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  TABLE_MAX_COLUMNS,
  TABLE_MAX_ROWS,
  TABLE_SAFE_TOTAL_CHARS,
  buildTableBlock,
  isNumericCell,
  monospaceTable,
} from '../../src/render/table-block.ts';
import { startFakeSlack } from '../harness/slack/fake-slack-api.ts';
import type { FakeSlack } from '../harness/slack/fake-slack-api.ts';

const header = ['GPU', 'Name', 'Used', 'Total', 'Util'];
const gpuRows = [
  ['0', 'NVIDIA RTX A6000', '45213 MiB', '49140 MiB', '97 %'],
  ['1', 'NVIDIA RTX A6000', '3 MiB', '49140 MiB', '0 %'],
];
const texts = (rows: Array<Array<{ text: string }>>) => rows.map((r) => r.map((c) => c.text));

describe('buildTableBlock', () => {
  it('builds raw_text rows with the header first and right-aligns numeric columns', () => {
    const { block, shownRows, omittedRows, omittedColumns } = buildTableBlock(header, gpuRows);
    // Compile-time check: the block is a @slack/types TableBlock.
    const typed: types.TableBlock = block;
    expect(typed.type).toBe('table');
    expect(texts(block.rows)).toEqual([header, ...gpuRows]);
    expect(block.rows.flat().every((c) => c.type === 'raw_text')).toBe(true);
    expect(block.column_settings).toEqual([
      { align: 'right' },
      { align: 'left' },
      { align: 'right' },
      { align: 'right' },
      { align: 'right' },
    ]);
    expect({ shownRows, omittedRows, omittedColumns }).toEqual({ shownRows: 2, omittedRows: 0, omittedColumns: 0 });
  });

  it('fills empty and missing cells (Slack refuses empty raw_text) and flattens newlines', () => {
    const { block } = buildTableBlock(['PID', 'Command'], [['123', ''], ['456'], ['789', 'python\ntrain.py']]);
    expect(texts(block.rows)).toEqual([
      ['PID', 'Command'],
      ['123', '-'],
      ['456', '-'],
      ['789', 'python train.py'],
    ]);
    // Command is a text column: left, the default, so only the PID column needs a setting.
    expect(block.column_settings).toEqual([{ align: 'right' }]);
  });

  it('honours explicit alignment, wrapping and block_id', () => {
    const { block } = buildTableBlock(['PID', 'Command'], [['1', 'x']], {
      align: ['center'],
      wrap: [false, true],
      blockId: 'holders-before',
    });
    expect(block.block_id).toBe('holders-before');
    expect(block.column_settings).toEqual([{ align: 'center' }, { align: 'left', is_wrapped: true }]);
  });

  it('keeps exactly 99 body rows without truncation (header + 99 = 100)', () => {
    const rows = Array.from({ length: 99 }, (_, i) => [String(i), `ct${i}`]);
    const built = buildTableBlock(['#', 'Target'], rows);
    expect(built.block.rows).toHaveLength(TABLE_MAX_ROWS);
    expect(built.omittedRows).toBe(0);
  });

  it('truncates past 100 rows with a final "… N more rows" row and reports it', () => {
    const rows = Array.from({ length: 250 }, (_, i) => [String(i), `ct${i}`]);
    const built = buildTableBlock(['#', 'Target'], rows);
    expect(built.block.rows).toHaveLength(TABLE_MAX_ROWS);
    expect(built.shownRows).toBe(98);
    expect(built.omittedRows).toBe(152);
    expect(texts(built.block.rows).at(-1)).toEqual(['… 152 more rows', ' ']);
    expect(texts(built.block.rows)[98]).toEqual(['97', 'ct97']);
  });

  it('stays under the cell-text budget by folding rows into the "more" row', () => {
    const long = 'x'.repeat(400);
    const rows = Array.from({ length: 60 }, (_, i) => [String(i), long]);
    const built = buildTableBlock(['#', 'Cmdline'], rows);
    const total = built.block.rows.flat().reduce((n, c) => n + c.text.length, 0);
    expect(total).toBeLessThanOrEqual(TABLE_SAFE_TOTAL_CHARS);
    expect(built.omittedRows).toBeGreaterThan(0);
    expect(built.shownRows + built.omittedRows).toBe(60);
    expect(texts(built.block.rows).at(-1)?.[0]).toBe(`… ${built.omittedRows} more rows`);
  });

  it('clips long cells with an ellipsis', () => {
    const { block } = buildTableBlock(['Cmd'], [['a'.repeat(600)]], { maxCellChars: 10 });
    expect(block.rows[1]?.[0]?.text).toBe('aaaaaaaaa…');
  });

  it('drops columns past 20 and reports them', () => {
    const wide = Array.from({ length: 23 }, (_, i) => `c${i}`);
    const built = buildTableBlock(wide, [wide]);
    expect(built.block.rows.every((r) => r.length === TABLE_MAX_COLUMNS)).toBe(true);
    expect(built.omittedColumns).toBe(3);
  });

  it('property: any input gives a block inside Slack limits that accounts for every row', () => {
    const cellArb = fc.string({ maxLength: 80 });
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 25 }),
        fc.array(fc.array(cellArb, { maxLength: 25 }), { maxLength: 300 }),
        (cols, rows) => {
          const head = Array.from({ length: cols }, (_, i) => `h${i}`);
          const built = buildTableBlock(head, rows);
          const all = built.block.rows.flat();
          expect(built.block.rows.length).toBeLessThanOrEqual(TABLE_MAX_ROWS);
          expect(built.block.rows.every((r) => r.length === Math.min(cols, TABLE_MAX_COLUMNS))).toBe(true);
          expect(all.every((c) => c.text.length > 0 && !/[\r\n]/.test(c.text))).toBe(true);
          expect(all.reduce((n, c) => n + c.text.length, 0)).toBeLessThanOrEqual(TABLE_SAFE_TOTAL_CHARS);
          expect(built.shownRows + built.omittedRows).toBe(rows.length);
          expect((built.block.column_settings ?? []).length).toBeLessThanOrEqual(TABLE_MAX_COLUMNS);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('isNumericCell', () => {
  it.each(['0', '45213 MiB', '97 %', '97%', '1,024', '-3.5', '250W', '71°C'])('%s is numeric', (t) =>
    expect(isNumericCell(t)).toBe(true),
  );
  it.each(['NVIDIA RTX A6000', 'ct129', '', 'N/A', '12 apples', 'GPU-5c1e'])('%s is not', (t) =>
    expect(isNumericCell(t)).toBe(false),
  );
});

describe('monospaceTable', () => {
  it('renders an aligned table in code fences, numbers right-aligned', () => {
    expect(monospaceTable(header, gpuRows)).toBe(
      [
        '```',
        'GPU  Name                   Used      Total  Util',
        '---  ----------------  ---------  ---------  ----',
        '  0  NVIDIA RTX A6000  45213 MiB  49140 MiB  97 %',
        '  1  NVIDIA RTX A6000      3 MiB  49140 MiB   0 %',
        '```',
      ].join('\n'),
    );
  });

  it('escapes &, <, > for mrkdwn and keeps backticks from closing the fence', () => {
    const out = monospaceTable(['Cmd'], [['a && b > /dev/null'], ['echo `id`']]);
    expect(out).toContain('a &amp;&amp; b &gt; /dev/null');
    expect(out).toContain('echo ˋidˋ');
    expect(out.match(/```/g)).toHaveLength(2);
  });

  it('fits the budget by dropping rows into a final "… N more rows" line', () => {
    const rows = Array.from({ length: 500 }, (_, i) => [String(i), `ct${i}`, 'NVIDIA RTX A6000']);
    const out = monospaceTable(['#', 'Target', 'GPU'], rows);
    expect(out.length).toBeLessThanOrEqual(3000);
    const more = /… (\d+) more rows\n```$/.exec(out);
    expect(more).not.toBeNull();
    const shown = out.split('\n').length - 5; // fences, header, rule, "more" line
    expect(shown + Number(more?.[1])).toBe(500);
    expect(monospaceTable(['#', 'Target', 'GPU'], rows, { maxChars: 3000 + 1 }).length).toBeLessThanOrEqual(3001);
  });
});

const silent = silentSlackLogger;

describe('built tables against the fake Slack API', () => {
  let fake: FakeSlack;
  let client: WebClient;
  beforeAll(async () => {
    fake = await startFakeSlack();
    client = new WebClient(fake.botToken, { slackApiUrl: fake.apiUrl, retryConfig: { retries: 0 }, logger: silent });
  });
  afterAll(async () => {
    await fake.close();
  });

  it('a 250-row table is accepted once built, with the monospace text as fallback; the raw one is refused', async () => {
    const rows = Array.from({ length: 250 }, (_, i) => [String(i), `ct${i}`, `${i * 10} MiB`]);
    const head = ['#', 'Target', 'Used'];
    const { block } = buildTableBlock(head, rows);
    const text = monospaceTable(head, rows);
    await expect(client.chat.postMessage({ channel: 'C0GPUOPS01', text, blocks: [block] })).resolves.toMatchObject({
      ok: true,
    });
    const raw = { type: 'table', rows: [head, ...rows].map((r) => r.map((t) => ({ type: 'raw_text', text: t }))) };
    await expect(client.chat.postMessage({ channel: 'C0GPUOPS01', text, blocks: [raw] })).rejects.toMatchObject({
      data: { error: 'invalid_blocks' },
    });
    expect(fake.messages('C0GPUOPS01')).toHaveLength(1);
  });
});
