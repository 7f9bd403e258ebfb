import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // End-to-end suites start real sshd, Redis queues and HTTP servers; two cores only.
    fileParallelism: true,
    maxWorkers: 2,
    // The JSON summary lets .ci/run print one plain "N passed, N failed" line.
    reporters: ['default', ['json', { outputFile: '.test-results/vitest.json' }]],
  },
});
