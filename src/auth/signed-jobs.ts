import type { KeyObject } from 'node:crypto';
import { type Envelope, type Fields, newNonce, openFields, signFields } from './envelope.ts';

/**
 * The bot's signatures on what can lead to a signal or a reset, and the worker's reading of them.
 * Pure: keys and clocks are passed in.
 */

const DEFAULT_SIGNED_TTL_MS = 5 * 60 * 1000;

export interface BotSigner {
  /**
   * An unstick request (a slash command, or an alert's Unstick click), as the bot authenticated it,
   * with where it acts as the bot resolved it from its own inventory: the container's host and vmid,
   * and for an alert about one GPU that GPU's UUID (then only that GPU may be reset, nothing signalled).
   */
  request(r: SignedRequest, now: number): Envelope;
  /** A click on Approve or Deny, naming the plan (its digest) the card showed. */
  decision(
    d: {
      approvalId: string;
      incidentId: string;
      planDigest: string;
      decision: 'approved' | 'denied';
      decider: string;
      channel: string;
      /** The decider's memberships as the bot last read them (teams); default none. */
      groups?: string;
    },
    now: number,
  ): Envelope;
}

export interface SignedRequest {
  incidentId: string;
  /** The inventory id of the container (or host) asked about. */
  target: string;
  /** The inventory id of the Proxmox host the target lives on (the target itself for a host). */
  host: string;
  /** The container's Proxmox id; null for a host. */
  vmid: number | null;
  /** One GPU's UUID when the request is an alert's about that GPU; default none. */
  gpu?: string;
  requester: string;
  /** The requester's memberships as the bot last read them (teams); default none. */
  groups?: string;
  channel: string;
}

export function botSigner(key: KeyObject, ttlMs: number = DEFAULT_SIGNED_TTL_MS): BotSigner {
  const times = (now: number) => ({ signed_at: String(now), expires_at: String(now + ttlMs), nonce: newNonce() });
  return {
    request: (r, now) =>
      signFields(
        'request',
        {
          incident: r.incidentId,
          target: r.target,
          host: r.host,
          vmid: r.vmid === null ? '' : String(r.vmid),
          gpu: r.gpu ?? '',
          requester: r.requester,
          groups: r.groups ?? '',
          channel: r.channel,
          ...times(now),
        },
        key,
      ),
    decision: (d, now) =>
      signFields(
        'decision',
        {
          approval: d.approvalId,
          incident: d.incidentId,
          plan: d.planDigest,
          decision: d.decision,
          decider: d.decider,
          groups: d.groups ?? '',
          channel: d.channel,
          ...times(now),
        },
        key,
      ),
  };
}

export interface SignedTimes {
  signedAt: number;
  expiresAt: number;
  nonce: string;
}

export type Checked<T> =
  | { ok: true; value: T & SignedTimes }
  | { ok: false; code: 'unsigned' | 'mismatch' | 'lapsed'; why: string };

function times(f: { signed_at: string; expires_at: string; nonce: string }): SignedTimes | null {
  const signedAt = Number(f.signed_at);
  const expiresAt = Number(f.expires_at);
  if (!Number.isSafeInteger(signedAt) || !Number.isSafeInteger(expiresAt) || expiresAt <= signedAt) return null;
  if (!/^[A-Za-z0-9_-]{16,64}$/.test(f.nonce)) return null;
  return { signedAt, expiresAt, nonce: f.nonce };
}

/**
 * Signed, by the bot, for this incident and target (and, when given, this host and vmid), and not
 * past its expiry at `now` unless `lapsedOk` (a card's step: the decision's expiry counts then).
 */
export function checkRequest(
  env: Envelope | null,
  keys: readonly KeyObject[],
  want: { incidentId: string; target: string; host?: string; vmid?: number | null },
  now: number,
  lapsedOk = false,
): Checked<{ requester: string; channel: string; host: string; vmid: number | null; gpu: string | null }> {
  const o = openFields('request', env, keys);
  if (!o.ok) return { ok: false, code: 'unsigned', why: o.why };
  const f: Fields<'request'> = o.fields;
  const t = times(f);
  if (t === null) return { ok: false, code: 'unsigned', why: 'the signed request has unreadable times or nonce' };
  if (f.incident !== want.incidentId || f.target !== want.target)
    return { ok: false, code: 'mismatch', why: 'the signed request is for another incident or target' };
  const vmid = f.vmid === '' ? null : /^[1-9]\d{0,8}$/.test(f.vmid) ? Number(f.vmid) : Number.NaN;
  if (Number.isNaN(vmid)) return { ok: false, code: 'unsigned', why: 'the signed request has an unreadable vmid' };
  if ((want.host !== undefined && f.host !== want.host) || (want.vmid !== undefined && vmid !== want.vmid))
    return { ok: false, code: 'mismatch', why: 'the signed request is for another host or container' };
  if (!lapsedOk && now > t.expiresAt)
    return {
      ok: false,
      code: 'lapsed',
      why: `the request waited ${Math.round((now - t.signedAt) / 1000)} s for a worker, past its ${Math.round((t.expiresAt - t.signedAt) / 1000)} s limit`,
    };
  return {
    ok: true,
    value: { requester: f.requester, channel: f.channel, host: f.host, vmid, gpu: f.gpu === '' ? null : f.gpu, ...t },
  };
}

/** Signed, by the bot, for this approval, incident and plan digest, and not past its expiry at `now`. */
export function checkDecision(
  env: Envelope | null,
  keys: readonly KeyObject[],
  want: { approvalId: string; incidentId: string; planDigest: string },
  now: number,
): Checked<{ decision: 'approved' | 'denied'; decider: string; channel: string }> {
  const o = openFields('decision', env, keys);
  if (!o.ok) return { ok: false, code: 'unsigned', why: o.why };
  const f: Fields<'decision'> = o.fields;
  const t = times(f);
  if (t === null) return { ok: false, code: 'unsigned', why: 'the signed decision has unreadable times or nonce' };
  if (f.decision !== 'approved' && f.decision !== 'denied')
    return { ok: false, code: 'unsigned', why: 'the signed decision is neither approve nor deny' };
  if (f.approval !== want.approvalId || f.incident !== want.incidentId)
    return { ok: false, code: 'mismatch', why: 'the signed decision is for another approval or incident' };
  if (f.plan !== want.planDigest)
    return {
      ok: false,
      code: 'mismatch',
      why: 'the signed decision names another plan than the one this worker signed',
    };
  if (now > t.expiresAt)
    return {
      ok: false,
      code: 'lapsed',
      why: `the decision waited ${Math.round((now - t.signedAt) / 1000)} s for a worker, past its ${Math.round((t.expiresAt - t.signedAt) / 1000)} s limit`,
    };
  return { ok: true, value: { decision: f.decision, decider: f.decider, channel: f.channel, ...t } };
}
