import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { KIND_OF_ALERTNAME } from '../../src/alertmanager/map.ts';

const RULES = ['deploy/monitoring/dcgm-rules.yml', 'deploy/monitoring/gpu-medic-rules.yml'];
const run = (bin: string, args: string[]): string => execFileSync(bin, args, { encoding: 'utf8', stdio: 'pipe' });
const alertNames = (file: string): string[] =>
  (parse(readFileSync(file, 'utf8')) as { groups: Array<{ rules: Array<{ alert: string }> }> }).groups.flatMap((g) =>
    g.rules.map((r) => r.alert),
  );

describe("the docs' Prometheus rules and Alertmanager config, checked by the real tools", () => {
  it('promtool check rules accepts both rule files', () => {
    expect(run('promtool', ['check', 'rules', ...RULES])).toMatch(
      /SUCCESS: 7 rules found[\s\S]*SUCCESS: 4 rules found/,
    );
  });

  it('amtool check-config accepts the receiver configuration', () => {
    expect(run('amtool', ['check-config', 'deploy/monitoring/alertmanager.yml'])).toContain('SUCCESS');
  });

  it("every alert name the receiver maps to a watchdog kind is one of these rules', and docs/alertmanager.md lists each rule", () => {
    const names = RULES.flatMap(alertNames);
    for (const n of Object.keys(KIND_OF_ALERTNAME)) expect(names).toContain(n);
    const doc = readFileSync('docs/alertmanager.md', 'utf8');
    for (const n of names) expect(doc, n).toContain(`\`${n}\``);
  });
});
