/**
 * The production build the deploy tests (and bench/) check: the one test/harness/dist.ts keeps
 * up to date for every test that runs the compiled entry point.
 */
export { buildDist, MAIN_JS, ROOT } from '../harness/dist.ts';
