import { load } from './test/faults/scenarios/load.ts';
import { percentile } from './test/faults/lib/figures.ts';
const f = await load({ machines: 12, burst: 200, statusAll: 3, drainMs: 90_000 });
console.log('p50', percentile(f.ackMs, 50), 'p99', percentile(f.ackMs, 99), 'failures', f.failures.length);
process.exit(0);
