import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { z } from 'zod';
import type { Envelope } from '../auth/envelope.ts';
import type { BotSigner } from '../auth/signed-jobs.ts';
import { planDigest } from '../plan/plan-seal.ts';
import type { ApprovalDecision, ApprovalState, DecideRefusalCode, Escalation } from './approval-policy.ts';

/** A tier-2 step waiting for (or past) a second person's decision. Times are ms since epoch. */
export interface Approval {
  /** Unguessable: the only thing an Approve/Deny button carries. */
  id: string;
  incidentId: string;
  stepId: string;
  /** `stepHash` of the step as shown on the card (for the record; the worker checks its sealed plan, not this). */
  planHash: string;
  requester: string;
  /** Slack user IDs allowed to decide, frozen when the card was posted. */
  approvers: string[];
  createdAt: number;
  expiresAt: number;
  state: ApprovalState;
  decidedBy: string | null;
  decidedAt: number | null;
  /**
   * The worker's sealed plan (src/plan/plan-seal.ts): what a worker acting on this approval
   * rebuilds its commands from, after checking the seal. Null when none was stored.
   */
  seal: { body: string; mac: string; sig: string } | null;
  /**
   * The bot's signature of the decision (src/auth/signed-jobs.ts): who decided, approve or deny,
   * which plan digest, when. A worker acts on this, never on `state`/`decidedBy`. Null: none.
   */
  signedDecision: Envelope | null;
  /**
   * The escalation group, frozen when the card was posted like `approvers`: they may ALSO decide,
   * from `at` (ms) on, never before. Absent: the card does not escalate.
   */
  escalation?: Escalation;
}

export interface CreateApproval {
  /** Chosen by the caller (`ApprovalStore.newId()`) when the seal must name it; default a new one. */
  id?: string;
  seal?: { body: string; mac: string; sig: string };
  incidentId: string;
  stepId: string;
  planHash: string;
  requester: string;
  approvers: readonly string[];
  now: number;
  expiresAt: number;
  /** From `escalationOf` (approval-policy.ts); absent or null: no escalation. */
  escalation?: Escalation | null;
}

export type StoreRefusalCode = DecideRefusalCode | 'approval_not_found';

export type DecideResult =
  | { ok: true; approval: Approval }
  | { ok: false; code: StoreRefusalCode; approval: Approval | null };

export type ExpireResult =
  | { expired: true; approval: Approval }
  | {
      expired: false;
      reason: 'not_due' | 'decided' | 'already_expired' | 'approval_not_found';
      approval: Approval | null;
    };

export interface ApprovalStoreOptions {
  /** How long an approval record is kept after it expires, for the incident record. Default 7 days. */
  retentionMs?: number;
  /** The bot's: signs every decision it stores (the worker acts on nothing else). Workers' stores have none. */
  signer?: BotSigner;
}

const ID = /^apr_[A-Za-z0-9_-]{22}$/;
const DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000;

/**
 * pending → approved|denied, atomically, with the same rules as `canDecide` (approval-policy.ts):
 * decided and expired are final, then the requester ban, then the approvers stored with the
 * approval and the decider's live list (someone removed since the card was posted is refused);
 * else the escalation group stored with it, from its time on, and the live escalation list.
 * First decision wins; later clicks read who decided.
 * ARGV: user, decision, now (ms), live approvers (JSON array, or '' when the caller has none to add), id,
 * live escalation group (JSON array; '' = none, and with no live approvers either: not checked).
 * The bot signs the decision only after this step accepted it (SIGN below).
 * In the same step the decision joins the "decided, not yet taken up by a worker" index (KEYS[2]):
 * if queueing its job fails afterwards, a worker's sweep finds it there and queues it.
 */
const DECIDE = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 'approval_not_found' end
local f = redis.call('HMGET', KEYS[1], 'state', 'requester', 'approvers', 'expiresAt')
local state = f[1]
if state == 'approved' or state == 'denied' then return 'approval_decided' end
if state == 'expired' or tonumber(ARGV[3]) >= tonumber(f[4]) then return 'approval_expired' end
if ARGV[1] == f[2] then return 'self_approval' end
local function has(list, u)
  for _, a in ipairs(list) do if a == u then return true end end
  return false
end
local checkLive = ARGV[4] ~= ''
local allowed = has(cjson.decode(f[3]), ARGV[1]) and (not checkLive or has(cjson.decode(ARGV[4]), ARGV[1]))
if not allowed then
  local esc = redis.call('HGET', KEYS[1], 'escalation')
  if not esc then return 'not_approver' end
  local e = cjson.decode(esc)
  local liveEsc = true
  if checkLive or ARGV[6] ~= '' then liveEsc = ARGV[6] ~= '' and has(cjson.decode(ARGV[6]), ARGV[1]) end
  if not (has(e['approvers'], ARGV[1]) and liveEsc) then return 'not_approver' end
  if tonumber(ARGV[3]) < tonumber(e['at']) then return 'escalation_not_due' end
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'decidedBy', ARGV[1], 'decidedAt', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
return 'ok'
`;

/**
 * Keeps the bot's signature of a decision the DECIDE step accepted: only when the record says
 * that user decided that way at that time, and has no signature yet. ARGV: user, decision, decidedAt (ms), body, sig.
 */
const SIGN = `
local f = redis.call('HMGET', KEYS[1], 'state', 'decidedBy', 'decidedAt', 'decisionBody')
if f[1] ~= ARGV[2] or f[2] ~= ARGV[1] or f[3] ~= ARGV[3] or f[4] then return 0 end
redis.call('HSET', KEYS[1], 'decisionBody', ARGV[4], 'decisionSig', ARGV[5])
return 1
`;

/** pending → expired once its time has come; idempotent. ARGV: now (ms). */
const EXPIRE = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 'approval_not_found' end
local f = redis.call('HMGET', KEYS[1], 'state', 'expiresAt')
if f[1] == 'expired' then return 'already_expired' end
if f[1] ~= 'pending' then return 'decided' end
if tonumber(ARGV[1]) < tonumber(f[2]) then return 'not_due' end
redis.call('HSET', KEYS[1], 'state', 'expired', 'decidedAt', ARGV[1])
return 'ok'
`;

const Stored = z.object({
  id: z.string(),
  incidentId: z.string(),
  stepId: z.string(),
  planHash: z.string(),
  requester: z.string(),
  approvers: z.string(),
  createdAt: z.coerce.number().int(),
  expiresAt: z.coerce.number().int(),
  state: z.enum(['pending', 'approved', 'denied', 'expired']),
  decidedBy: z.string().optional(),
  decidedAt: z.coerce.number().int().optional(),
  sealBody: z.string().optional(),
  sealMac: z.string().optional(),
  sealSig: z.string().optional(),
  decisionBody: z.string().optional(),
  decisionSig: z.string().optional(),
  escalation: z.string().optional(),
});

const Approvers = z.array(z.string());
const EscalationJson = z.object({ approvers: z.array(z.string()), at: z.number().int() });
const RefusalCode = z.enum([
  'self_approval',
  'not_approver',
  'escalation_not_due',
  'approval_expired',
  'approval_decided',
  'approval_not_found',
]);
const ExpireReason = z.enum(['not_due', 'decided', 'already_expired', 'approval_not_found']);

/** Approvals on Redis, one hash per approval, every transition a Lua script. */
export class ApprovalStore {
  private readonly retentionMs: number;
  private readonly signer: BotSigner | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    opts: ApprovalStoreOptions = {},
  ) {
    this.retentionMs = opts.retentionMs ?? DEFAULT_RETENTION_MS;
    this.signer = opts.signer;
  }

  private key(id: string): string {
    return `${this.prefix}:approval:${id}`;
  }

  private undispatchedKey(): string {
    return `${this.prefix}:approvals:undispatched`;
  }

  /** Decisions made at or before `before` (ms) that no worker has taken up yet: their decision job may never have been queued. */
  async undispatched(before: number, limit = 100): Promise<string[]> {
    const ids = await this.redis.zrangebyscore(this.undispatchedKey(), '-inf', String(before), 'LIMIT', 0, limit);
    return ids.filter((id) => ApprovalStore.isId(id));
  }

  /** A worker took the decision up (its job runs): the sweep leaves it alone from now on. */
  async dispatched(id: string): Promise<void> {
    await this.redis.zrem(this.undispatchedKey(), id);
  }

  /** Whether a decision still waits for a worker to take it up. */
  async isUndispatched(id: string): Promise<boolean> {
    return (await this.redis.zscore(this.undispatchedKey(), id)) !== null;
  }

  static newId(): string {
    return `apr_${randomBytes(16).toString('base64url')}`;
  }

  static isId(text: string): boolean {
    return ID.test(text);
  }

  async create(input: CreateApproval): Promise<Approval> {
    if (input.id !== undefined && !ApprovalStore.isId(input.id)) throw new Error('not an approval id');
    const approval: Approval = {
      id: input.id ?? ApprovalStore.newId(),
      incidentId: input.incidentId,
      stepId: input.stepId,
      planHash: input.planHash,
      requester: input.requester,
      approvers: [...input.approvers],
      createdAt: input.now,
      expiresAt: input.expiresAt,
      state: 'pending',
      decidedBy: null,
      decidedAt: null,
      seal: input.seal ?? null,
      signedDecision: null,
      ...(input.escalation
        ? { escalation: { approvers: [...input.escalation.approvers], at: input.escalation.at } }
        : {}),
    };
    const key = this.key(approval.id);
    await this.redis
      .multi()
      .hset(key, {
        id: approval.id,
        incidentId: approval.incidentId,
        stepId: approval.stepId,
        planHash: approval.planHash,
        requester: approval.requester,
        approvers: JSON.stringify(approval.approvers),
        createdAt: String(approval.createdAt),
        expiresAt: String(approval.expiresAt),
        state: approval.state,
        ...(approval.seal
          ? { sealBody: approval.seal.body, sealMac: approval.seal.mac, sealSig: approval.seal.sig }
          : {}),
        ...(approval.escalation ? { escalation: JSON.stringify(approval.escalation) } : {}),
      })
      .pexpireat(key, approval.expiresAt + this.retentionMs)
      .exec();
    return approval;
  }

  async get(id: string): Promise<Approval | null> {
    if (!ApprovalStore.isId(id)) return null;
    const raw = await this.redis.hgetall(this.key(id));
    if (Object.keys(raw).length === 0) return null;
    const s = Stored.safeParse(raw);
    if (!s.success) return null;
    let list: unknown;
    try {
      list = JSON.parse(s.data.approvers);
    } catch {
      return null;
    }
    const approvers = Approvers.safeParse(list);
    if (!approvers.success) return null;
    const { sealBody, sealMac, sealSig, decisionBody, decisionSig, escalation: escRaw, ...rest } = s.data;
    let escalation: z.infer<typeof EscalationJson> | undefined;
    if (escRaw !== undefined) {
      // A record whose escalation cannot be read is refused whole, as one whose approvers cannot.
      try {
        const e = EscalationJson.safeParse(JSON.parse(escRaw));
        if (!e.success) return null;
        escalation = e.data;
      } catch {
        return null;
      }
    }
    return {
      ...rest,
      ...(escalation ? { escalation } : {}),
      approvers: approvers.data,
      decidedBy: s.data.decidedBy ?? null,
      decidedAt: s.data.decidedAt ?? null,
      seal:
        sealBody !== undefined && sealMac !== undefined ? { body: sealBody, mac: sealMac, sig: sealSig ?? '' } : null,
      signedDecision:
        decisionBody !== undefined && decisionSig !== undefined ? { body: decisionBody, sig: decisionSig } : null,
    };
  }

  /**
   * One atomic transition; a double click or a race returns `approval_decided` with who decided.
   * `liveApprovers`: the decider's configuration now (the bot's GPU_MEDIC_APPROVERS); the user must
   * be on it as well as on the list frozen into the approval. `liveEscalation` likewise for the
   * escalation group (GPU_MEDIC_ESCALATION_APPROVERS): with live approvers given and no live
   * escalation group, nobody decides through the escalation.
   */
  async decide(
    id: string,
    d: {
      user: string;
      decision: ApprovalDecision;
      now: number;
      liveApprovers?: readonly string[];
      liveEscalation?: readonly string[];
      /** The plan digest the card showed (its button carries it); default the stored plan's. */
      planDigest?: string;
      /** Where the click came from, for the signed record. */
      channel?: string;
    },
  ): Promise<DecideResult> {
    if (!ApprovalStore.isId(id)) return { ok: false, code: 'approval_not_found', approval: null };
    const live = d.liveApprovers === undefined ? '' : JSON.stringify([...d.liveApprovers]);
    const liveEsc = d.liveEscalation === undefined ? '' : JSON.stringify([...d.liveEscalation]);
    // The policy first (the transition, atomically), then the signature: a click the rules refuse
    // is never signed, so no signed text of it ever travels to Redis, where MONITOR could see it.
    const res = String(
      await this.redis.eval(
        DECIDE,
        2,
        this.key(id),
        this.undispatchedKey(),
        d.user,
        d.decision,
        String(d.now),
        live,
        id,
        liveEsc,
      ),
    );
    if (res === 'ok') await this.sign(id, d);
    const approval = await this.get(id);
    if (res === 'ok' && approval !== null) return { ok: true, approval };
    const code = RefusalCode.safeParse(res);
    return { ok: false, code: code.success ? code.data : 'approval_not_found', approval };
  }

  /**
   * Signs the decision the store accepted and keeps the signature with it, once: only when the
   * record says this user decided this way at this time and carries no signature yet. Also the
   * repair for a bot that stopped between the transition and the signature (a retried click).
   * True when a signature is stored now.
   */
  async sign(
    id: string,
    d: { user: string; decision: ApprovalDecision; now: number; planDigest?: string; channel?: string },
  ): Promise<boolean> {
    if (!this.signer) return false;
    const [incidentId = null, sealBody = null] = await this.redis.hmget(this.key(id), 'incidentId', 'sealBody');
    if (incidentId === null) return false;
    const signed = this.signer.decision(
      {
        approvalId: id,
        incidentId,
        planDigest: d.planDigest ?? (sealBody === null ? '' : planDigest({ body: sealBody })),
        decision: d.decision,
        decider: d.user,
        channel: d.channel ?? '',
      },
      d.now,
    );
    const r = await this.redis.eval(SIGN, 1, this.key(id), d.user, d.decision, String(d.now), signed.body, signed.sig);
    return r === 1;
  }

  /** Marks a pending approval expired once `now` has reached its expiry; true only for the call that did it. */
  async expire(id: string, now: number): Promise<ExpireResult> {
    if (!ApprovalStore.isId(id)) return { expired: false, reason: 'approval_not_found', approval: null };
    const res = String(await this.redis.eval(EXPIRE, 1, this.key(id), String(now)));
    const approval = await this.get(id);
    if (res === 'ok' && approval !== null) return { expired: true, approval };
    const reason = ExpireReason.safeParse(res);
    return { expired: false, reason: reason.success ? reason.data : 'approval_not_found', approval };
  }
}
