import type { KeyObject } from 'node:crypto';
import { type Envelope, type Fields, newNonce, openFields, signFields } from './envelope.ts';

/**
 * The bot's signatures on what can lead to a signal or a reset, and the worker's reading of them.
 * Pure: keys and clocks are passed in.
 */

const DEFAULT_SIGNED_TTL_MS = 5 * 60 * 1000;

export interface BotSigner {
  /** An unstick request (a slash command, or an alert's Unstick click), as the bot authenticated it. */
  request(r: { incidentId: string; target: string; requester: string; channel: string }, now: number): Envelope;
  /** A click on Approve or Deny, naming the plan (its digest) the card showed. */
  decision(
    d: {
      approvalId: string;
      incidentId: string;
      planDigest: string;
      decision: 'approved' | 'denied';
      decider: string;
      channel: string;
    },
    now: number,
  ): Envelope;
}

export function botSigner(key: KeyObject, ttlMs: number = DEFAULT_SIGNED_TTL_MS): BotSigner {
  const times = (now: number) => ({ signed_at: String(now), expires_at: String(now + ttlMs), nonce: newNonce() });
  return {
    request: (r, now) =>
      signFields(
        'request',
        { incident: r.incidentId, target: r.target, requester: r.requester, channel: r.channel, ...times(now) },
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

/** Signed, by the bot, for this incident and target, and not past its expiry at `now`. */
export function checkRequest(
  env: Envelope | null,
  keys: readonly KeyObject[],
  want: { incidentId: string; target: string },
  now: number,
): Checked<{ requester: string; channel: string }> {
  const o = openFields('request', env, keys);
  if (!o.ok) return { ok: false, code: 'unsigned', why: o.why };
  const f: Fields<'request'> = o.fields;
  const t = times(f);
  if (t === null) return { ok: false, code: 'unsigned', why: 'the signed request has unreadable times or nonce' };
  if (f.incident !== want.incidentId || f.target !== want.target)
    return { ok: false, code: 'mismatch', why: 'the signed request is for another incident or target' };
  if (now > t.expiresAt)
    return {
      ok: false,
      code: 'lapsed',
      why: `the request waited ${Math.round((now - t.signedAt) / 1000)} s for a worker, past its ${Math.round((t.expiresAt - t.signedAt) / 1000)} s limit`,
    };
  return { ok: true, value: { requester: f.requester, channel: f.channel, ...t } };
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
