/**
 * Redis keys of the watchdog (which warns before a user has to ask), in one place (the watchdog's I/O lives
 * in src/watch-store/, its pure judgement in src/watchdog/): the worker writes them, the bot reads some
 * (snoozes are written by the bot's Snooze button; App Home reads the open alerts and the last readings).
 * Values are JSON written only by our processes, and are still validated when read.
 */
export const watchKeys = (prefix: string) => ({
  /** JSON WatchState (src/watchdog/judge.ts) of one machine: its alerts and most GPUs seen. */
  state: (machineId: string) => `${prefix}:watch:state:${machineId}`,
  /** Hash: snooze scope (`machineId` or `machineId/gpuIndex`) → until (ms since epoch). */
  snoozes: `${prefix}:watch:snoozes`,
  /** Sorted set: incident ids of raised, not yet cleared alerts, scored by when they were raised (ms). */
  open: `${prefix}:watch:open`,
  /** Hash: machineId → JSON `MachineGlance` of its last watchdog reading (src/watchdog/watch-glance.ts). */
  last: `${prefix}:watch:last`,
  /** Hash: machineId → when its last good reading was taken (ms since epoch; only moves forward). */
  lastGood: `${prefix}:watch:last-good`,
  /**
   * Hash: condition (src/watchdog/condition.ts: `machine|gpu|kind`) → the incident of its open
   * message, whichever source raised it first (the watchdog or Alertmanager): the second one joins it.
   */
  conditions: `${prefix}:watch:conditions`,
  /** Hash: member (a watchdog alert key, or `alertmanager:<fingerprint>`) → the incident it joined, while open. */
  members: `${prefix}:watch:members`,
  /** Set: the open members of one condition (the condition is released when the last one clears). */
  conditionMembers: (condition: string) => `${prefix}:watch:condition:${condition}`,
  /** Counter, incremented with every change above (App Home refreshes when it moves). */
  version: `${prefix}:watch:version`,
});
