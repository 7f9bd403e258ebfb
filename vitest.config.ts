import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Files whose assertions include a latency bound that is part of the contract (Slack's 3 s ack
 * for 200 commands at once). They run after everything else, one at a time, so the bound measures
 * gpu-medic and not a neighbouring test file's processes on the same two cores.
 */
const ALONE = ['test/faults/load.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The JSON summary lets .ci/run print one plain "N passed, N failed" line.
    reporters: ['default', ['json', { outputFile: '.test-results/vitest.json' }]],
    projects: [
      {
        extends: true,
        test: {
          name: 'suite',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...ALONE],
          // End-to-end suites start real sshd, Redis queues and HTTP servers; two cores only.
          fileParallelism: true,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'alone',
          include: ALONE,
          fileParallelism: false,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
