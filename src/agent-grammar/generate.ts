/**
 * `npm run -s agent:grammar`: writes agent/grammar.json and the scripts it names (agent/scripts/)
 * from the worker's templates (src/agent-grammar/grammar.ts). Commit the result;
 * test/unit/agent-grammar.test.ts fails when the committed files differ from what the templates make.
 */
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { grammarText, scriptFiles } from './grammar.ts';

const out = fileURLToPath(new URL('../../agent/grammar.json', import.meta.url));
writeFileSync(out, grammarText());
const dir = fileURLToPath(new URL('../../agent/scripts/', import.meta.url));
mkdirSync(dir, { recursive: true });
const scripts = scriptFiles();
for (const f of readdirSync(dir)) if (!(f in scripts)) rmSync(join(dir, f));
for (const [name, text] of Object.entries(scripts)) writeFileSync(join(dir, name), text);
process.stdout.write(`wrote ${out} and ${Object.keys(scripts).length} scripts in ${dir}\n`);
