/**
 * Fake `free`: host RAM from the host state (a container reads its host's numbers).
 * `-b` prints bytes; no flag prints KiB, as procps does.
 */
import { formatFreeBytes } from '../../../../src/gpu/format/index.ts';
import { appendToolLog } from '../state.ts';
import { machineContext } from './machine-context.ts';

const argv = process.argv.slice(2);
const ctx = machineContext();
appendToolLog(ctx.dir, 'free', argv);
const unknown = argv.filter((a) => a !== '-b' && a !== '--bytes' && a !== '-k' && a !== '--kibi' && a !== '-w');
if (unknown.length > 0) {
  process.stderr.write(`fake free: unsupported option ${unknown.join(' ')}\n`);
  process.exit(1);
}
const { ram } = ctx.readHostState();
const div = argv.includes('-b') || argv.includes('--bytes') ? 1 : 1024;
process.stdout.write(
  formatFreeBytes({
    totalBytes: Math.floor(ram.totalBytes / div),
    usedBytes: Math.floor(ram.usedBytes / div),
    availableBytes: null,
  }),
);
