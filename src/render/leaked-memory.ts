/**
 * What frees GPU memory that no process holds (a leaked context), and who decides: what the
 * unstick plan does about it (src/plan/unstick-plan.ts): a host-level reset as its own step, tier
 * 2, so a second person approves it (any configured approver but the requester; an admin only past
 * the host's blast-radius budget). An unstick of a container offers it for the GPUs that container
 * was given. One sentence for every place that says it: the host view of `/gpu status`
 * (status-flags.ts) and the watchdog's ghost-memory alert (alert.ts). Pure; mrkdwn.
 *
 * `unstick`: how the reader starts an unstick there (`/gpu unstick`, the alert's *Unstick*);
 * `one`: about one GPU (else several).
 */
export function leakedMemoryNext(unstick: string, one = true): string {
  return `only a host-level GPU reset frees it: ${unstick} on a container of this host that has ${one ? 'the GPU' : 'those GPUs'} offers the reset as its own step, approved by a second person`;
}
