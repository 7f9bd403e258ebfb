/**
 * Before any test file: dist/ up to date with the sources (test/harness/dist.ts), so a file that
 * starts gpu-medic as a process never waits for tsc inside its own hook's timeout (a first build
 * takes 30 to 60 s here, longer beside other work). An up-to-date dist/ costs a stat of each source.
 */
import { buildDist } from './dist.ts';

export default async function setup(): Promise<void> {
  await buildDist();
}
