/**
 * `npm run -s agent:grammar`: writes agent/grammar.json from the worker's templates
 * (src/agent-grammar/grammar.ts). Commit the result; test/unit/agent-grammar.test.ts fails when the
 * committed file differs from what the templates make.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { grammarText } from './grammar.ts';

const out = fileURLToPath(new URL('../../agent/grammar.json', import.meta.url));
writeFileSync(out, grammarText());
process.stdout.write(`wrote ${out}\n`);
