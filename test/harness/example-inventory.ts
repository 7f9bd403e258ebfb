/**
 * inventory.example.yaml as an operator leaves it after following its first line: the same file
 * with each placeholder fingerprint replaced by a well-formed one (config check refuses the
 * placeholders themselves). For tests that start a role on the example inventory.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const EXAMPLE_INVENTORY = fileURLToPath(new URL('../../inventory.example.yaml', import.meta.url));

/** The example's text with its placeholders filled in (each one a distinct well-formed fingerprint). */
export function filledExampleInventoryText(): string {
  let n = 0;
  return readFileSync(EXAMPLE_INVENTORY, 'utf8').replace(/SHA256:[A-Za-z0-9+/]*PLACEHOLDER[A-Za-z0-9+/]*/g, () => {
    n += 1;
    return `SHA256:${String(n).padStart(43, 'A')}`;
  });
}

/** Writes the filled-in example to a new temp file and returns its path. */
export function filledExampleInventory(): string {
  const path = join(mkdtempSync(join(tmpdir(), 'gpu-medic-example-inv-')), 'inventory.yaml');
  writeFileSync(path, filledExampleInventoryText());
  return path;
}
