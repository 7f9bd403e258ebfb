import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * The longest files (a fresh clone has no timing cache), started first, longest first: a long file
 * picked late runs on alone while the other workers idle (fuzz and the fresh-clone test, 45 s each,
 * started at 380-391 s of a 485 s run and were the suite's last files). Measured in a full run with
 * three suite workers (2026-12-03): the crash rows and the unstick scenarios 77-78 s, the watch
 * scenarios 48, fuzz 46, fresh clone 45, scenarios 41, signed jobs 36, alert kinds 28, health 26,
 * Slack down at start 24, the agent's parser fuzz 23, container and host kill 23, cold-round
 * handshakes 19, stalled approval 18. Order only: every file still runs, in the same pool.
 */
const LONGEST_FIRST = [
  // Group 1's longest: the short files fill the other worker beside it.
  'test/faults/load.test.ts',
  'test/faults/unstick-crash.test.ts',
  'test/scenarios/unstick-scenarios.test.ts',
  'test/scenarios/watch-scenarios.test.ts',
  'test/faults/fuzz.test.ts',
  'test/deploy/fresh-clone.test.ts',
  'test/scenarios/scenarios.test.ts',
  'test/unstick/signed-jobs.test.ts',
  'test/watchdog/alert-kinds.test.ts',
  'test/e2e/health.test.ts',
  'test/faults/slack-at-start.test.ts',
  'agent/test/parser-fuzz.test.ts',
  'test/unstick/container-and-host-kill.test.ts',
  'test/watchdog/cold-round-handshakes.test.ts',
  'test/e2e/stalled-approval.test.ts',
];

class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (f: TestSpecification): number => {
      const i = LONGEST_FIRST.findIndex((p) => f.moduleId.endsWith(p));
      return i < 0 ? LONGEST_FIRST.length : i;
    };
    return sorted
      .map((f, i) => ({ f, i }))
      .sort((a, b) => rank(a.f) - rank(b.f) || a.i - b.i)
      .map((x) => x.f);
  }
}

/**
 * Files heavy enough to starve their neighbours (200 commands at once over 12 machines). They run
 * after the fleet and stack files (project 'suite'), so their load does not push those past their
 * hook timeouts on two cores (they set no wall-clock bound themselves: the bench measures ack times).
 * Beside them run only the short files (project 'unit', same group): no fleet, no hook that waits on
 * a process, and the other core no longer idles while the load test runs on one.
 */
const ALONE = ['test/faults/load.test.ts'];

/** The short files (see the 'unit' project). */
const UNIT = ['test/render/**/*.test.ts', 'test/gpu/**/*.test.ts', 'test/unit/**/*.test.ts', 'test/docs/**/*.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    // Builds dist/ once, before the files that run `node dist/src/main.js` start (test/harness/dist.ts).
    globalSetup: ['test/harness/global-setup.ts'],
    sequence: { sequencer: LongestFirst },
    hookTimeout: 60_000,
    // The JSON summary lets .ci/run print one plain "N passed, N failed" line.
    reporters: ['default', ['json', { outputFile: '.test-results/vitest.json' }]],
    projects: [
      {
        extends: true,
        test: {
          // The short files: the pure core's tests and small unit tests (some on real Redis, each
          // under its own prefix); none starts a fleet, a stack or a timer that outlives it. A worker
          // keeps its loaded modules from file to file (isolate: false): these 60 files took 22 s
          // isolated and 11 s shared, the difference being each file loading the same graph again.
          // They run after the suite (whose files stay isolated), beside the load test (see ALONE).
          name: 'unit',
          include: UNIT,
          isolate: false,
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: {
          name: 'suite',
          include: ['test/**/*.test.ts', 'agent/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...ALONE, ...UNIT],
          // End-to-end suites start real sshd, Redis queues and HTTP servers, and mostly wait on them:
          // a full run with two workers used 0.75 of the two cores on average (440 CPU-s in 590 s,
          // 2026-12-03), so a third worker fills waits rather than adding load.
          fileParallelism: true,
          maxWorkers: 3,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'alone',
          include: ALONE,
          // A group has one pool size (vitest refuses two): 2, shared with 'unit'. With one file here
          // that is one worker for the load test and the other for the short files.
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
