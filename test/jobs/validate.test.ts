// The hand-written fast check of enqueue requests must accept exactly what the schema accepts, and the ops API's
// schemas exactly what the store accepts.
import { describe, expect, it } from 'vitest';
import {
  DATE_RANGE,
  LIMITS,
  MAX_BATCH,
  ValidationError,
  plainValid,
  prepareEnqueue,
  validateQueuePatch,
} from '../../shared/jobs/validate.js';
import {
  enqueueBody,
  enqueueJob,
  jobSearchQuery,
  metricsQuery,
  purgeBody,
  queuePatch,
  resurrectFilterBody,
} from '../../shared/ops/schemas.js';

const base = { queue: 'q', type: 't' };
const cases: Record<string, unknown>[] = [
  base,
  { ...base, payload: { a: 1 }, priority: -1_000_000, delayMs: 0, tags: ['a'], idempotencyKey: 'k', maxAttempts: 1000 },
  { ...base, runAt: new Date(), expiresAt: new Date() },
  { ...base, priority: 1_000_001 },
  { ...base, priority: 1.5 },
  { ...base, priority: Number.NaN },
  { ...base, priority: '1' },
  { ...base, delayMs: -1 },
  { ...base, delayMs: 366 * 24 * 3600 * 1000 + 1 },
  { ...base, delayMs: 5, runAt: new Date() },
  { ...base, runAt: new Date('nope') },
  { ...base, runAt: '2026-01-01T00:00:00Z' },
  { ...base, tags: Array.from({ length: 17 }, () => 'x') },
  { ...base, tags: [''] },
  { ...base, tags: ['x'.repeat(65)] },
  { ...base, tags: 'a' },
  { ...base, idempotencyKey: '' },
  { ...base, idempotencyKey: 'k'.repeat(201) },
  { ...base, maxAttempts: 0 },
  { ...base, extra: 1 },
  { queue: '', type: 't' },
  { queue: 'a b', type: 't' },
  { queue: 'q'.repeat(129), type: 't' },
  { type: 't' },
  { ...base, payload: undefined, priority: undefined },
  // The instants every engine stores (DATE_RANGE), at and past each end.
  { ...base, runAt: new Date(DATE_RANGE.min), expiresAt: new Date(DATE_RANGE.max) },
  { ...base, runAt: new Date(DATE_RANGE.min.getTime() - 1) },
  { ...base, expiresAt: new Date('0000-12-31T23:00:00.000Z') },
  { ...base, runAt: new Date(DATE_RANGE.max.getTime() + 1) },
  { ...base, expiresAt: new Date(8.64e15) },
  { ...base, payload: nested(LIMITS.payloadDepth) },
  { ...base, payload: nested(LIMITS.payloadDepth + 1) },
  { ...base, payload: { a: nested(LIMITS.payloadDepth) } },
  // JSON has no Infinity or NaN: stored, they would come back as null.
  { ...base, payload: { a: [1, Infinity] } },
  { ...base, payload: Number.NaN },
  { ...base, payload: { a: Number.MAX_VALUE, b: -0 } },
  // Integers past 2^53 (JSON.stringify prints their digits, which may not be the number meant) and BigInts.
  { ...base, payload: { items: [{ qty: 2 ** 53 }] } },
  { ...base, payload: { n: -(2 ** 60) } },
  { ...base, payload: { n: Number.MAX_SAFE_INTEGER, m: -Number.MAX_SAFE_INTEGER, x: 1e21, y: 2 ** 53 + 0.5 } },
  { ...base, payload: { n: 10n } },
];

// A value with `depth` arrays and objects around each other: [{"a":[{"a":...}]}].
function nested(depth: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = i % 2 ? { a: v } : [v];
  return v;
}

describe('enqueue validation', () => {
  it('the fast check and the schema agree on every case', () => {
    for (const c of cases) {
      let schemaOk = true;
      try {
        prepareEnqueue([c as never]);
      } catch (err) {
        expect(err).toBeInstanceOf(ValidationError);
        schemaOk = false;
      }
      // prepareEnqueue falls back to the schema when the fast check says no, so a case the fast check accepts
      // must also pass the schema on its own: check that by defeating the fast path (a null-prototype copy).
      const viaSchema = Object.assign(Object.create(null), c);
      let pureSchemaOk = true;
      try {
        prepareEnqueue([viaSchema]);
      } catch {
        pureSchemaOk = false;
      }
      expect({ case: c, fast: plainValid(c) }).toEqual({ case: c, fast: pureSchemaOk });
      expect(schemaOk).toBe(pureSchemaOk);
    }
  });

  it('a payload nests at most LIMITS.payloadDepth levels, at any size: deeper is refused naming the payload, never a stack overflow', () => {
    expect(prepareEnqueue([{ ...base, payload: nested(LIMITS.payloadDepth) }])).toHaveLength(1);
    // 100,000 levels fit in a 256 KB body; JSON.stringify overflows V8's stack long before.
    for (const depth of [LIMITS.payloadDepth + 1, 5_000, 100_000]) {
      for (const jobs of [[{ ...base, payload: nested(depth) }], [base, { ...base, payload: nested(depth) }]]) {
        let err: unknown;
        try {
          prepareEnqueue(jobs);
        } catch (e) {
          err = e;
        }
        expect(err, `depth ${depth}`).toBeInstanceOf(ValidationError);
        expect((err as ValidationError).field).toBe(jobs.length === 1 ? 'payload' : 'jobs[1].payload');
        expect((err as ValidationError).message).toMatch(/more than 128 levels deep/);
      }
    }
  });

  it('a payload number that is not finite is refused naming it (stored, JSON would make it null)', () => {
    for (const [payload, field] of [
      [{ a: [1, Infinity] }, 'payload.a[1]'],
      [Number.NaN, 'payload'],
      [{ b: -Infinity }, 'payload.b'],
    ] as const) {
      let err: unknown;
      try {
        prepareEnqueue([{ ...base, payload }]);
      } catch (e) {
        err = e;
      }
      expect(err, field).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).field).toBe(field);
    }
    expect(prepareEnqueue([{ ...base, payload: { a: Number.MAX_VALUE, b: -0 } }])).toHaveLength(1);
  });

  it('a payload integer past 2^53 or a BigInt is refused naming its JSON path; safe integers and exponent-form doubles pass', () => {
    const refused = (jobs: unknown[]): ValidationError => {
      try {
        prepareEnqueue(jobs as never);
      } catch (e) {
        expect(e).toBeInstanceOf(ValidationError);
        return e as ValidationError;
      }
      throw new Error(`accepted ${JSON.stringify(jobs, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v))}`);
    };
    const items = [{ qty: 1 }, { qty: 2 }, { qty: 3 }, { qty: 2 ** 53 + 2 }];
    const one = refused([{ ...base, payload: { items } }]);
    expect(one.field).toBe('payload.items[3].qty');
    expect(one.message).toMatch(/safe integer .*9007199254740991.*send it as a string/);
    expect(refused([base, { ...base, payload: { items } }]).field).toBe('jobs[1].payload.items[3].qty');
    expect(refused([{ ...base, payload: -(2 ** 53) }]).field).toBe('payload');
    expect(refused([{ ...base, payload: { items: [{ qty: Number.NaN }] } }]).field).toBe('payload.items[0].qty');
    // A BigInt: JSON.stringify throws naming no field; here the field and what to send instead.
    const big = refused([{ ...base, payload: { order: { id: 12345678901234567890n } } }]);
    expect(big.field).toBe('payload.order.id');
    expect(big.message).toMatch(/BigInt.*as a string/);
    const [ok] = prepareEnqueue([
      { ...base, payload: { a: Number.MAX_SAFE_INTEGER, b: -Number.MAX_SAFE_INTEGER, c: 1e21, d: Number.MAX_VALUE } },
    ]);
    expect(ok!.payload).toEqual({ a: 9007199254740991, b: -9007199254740991, c: 1e21, d: Number.MAX_VALUE });
  });

  it('takes up to MAX_BATCH (20,000) jobs per call', () => {
    expect(MAX_BATCH).toBe(20_000);
    expect(prepareEnqueue(Array.from({ length: MAX_BATCH }, () => base))).toHaveLength(MAX_BATCH);
    expect(() => prepareEnqueue(Array.from({ length: MAX_BATCH + 1 }, () => base))).toThrow(/at most 20000 jobs/);
  });
});

// The ops API builds its request schemas from the same module: on every value the two forms share, it accepts
// exactly what the store accepts (dates travel as ISO text over HTTP; a queue is optional there only).
describe('the ops API and the store accept the same values', () => {
  const accepts = (f: () => unknown) => {
    try {
      f();
      return true;
    } catch {
      return false;
    }
  };
  const overHttp = (job: Record<string, unknown>) =>
    Object.fromEntries(Object.entries(job).map(([k, v]) => [k, v instanceof Date ? String(v.toJSON()) : v]));

  it('enqueue: every case with a queue and no text date is accepted by both or refused by both', () => {
    const shared = cases.filter((c) => 'queue' in c && typeof c.runAt !== 'string');
    expect(shared.length).toBeGreaterThan(20);
    for (const c of shared) {
      const store = accepts(() => prepareEnqueue([c as never]));
      const api = enqueueJob.safeParse(overHttp(c)).success;
      expect({ case: c, api }).toEqual({ case: c, api: store });
    }
  });

  it('queue settings: both take each bound and refuse one past it', () => {
    const patches: Record<string, unknown>[] = [
      { maxConcurrency: null },
      { maxConcurrency: LIMITS.maxConcurrency },
      { maxConcurrency: LIMITS.maxConcurrency + 1 },
      { maxConcurrency: -1 },
      { zombieTimeoutSeconds: LIMITS.zombieTimeoutSeconds },
      { zombieTimeoutSeconds: LIMITS.zombieTimeoutSeconds + 1 },
      { zombieTimeoutSeconds: 0 },
      { maxAttempts: LIMITS.maxAttempts },
      { maxAttempts: LIMITS.maxAttempts + 1 },
      { zombiePolicy: 'retry' },
      { zombiePolicy: 'sometimes' },
      ...(['archiveRetentionSeconds', 'dlqRetentionSeconds', 'metricsRetentionSeconds'] as const).flatMap((k) => [
        { [k]: LIMITS.minRetentionSeconds },
        { [k]: LIMITS.minRetentionSeconds - 1 },
        { [k]: LIMITS.maxRetentionSeconds },
        { [k]: LIMITS.maxRetentionSeconds + 1 },
        { [k]: 1.5 },
      ]),
      { unknown: 1 },
    ];
    let refused = 0;
    for (const p of patches) {
      const store = accepts(() => validateQueuePatch('q', p as never));
      const api = queuePatch.safeParse(p).success;
      expect({ patch: p, api }).toEqual({ patch: p, api: store });
      if (!store) refused++;
    }
    expect(refused).toBeGreaterThan(10);
  });

  it('the limits the API states are the store limits', () => {
    const pageOf = (limit: number) => jobSearchQuery.safeParse({ limit: String(limit) }).success;
    expect([pageOf(LIMITS.searchJobs), pageOf(LIMITS.searchJobs + 1)]).toEqual([true, false]);
    const batchOf = (n: number) =>
      enqueueBody.safeParse({ jobs: Array.from({ length: n }, () => ({ queue: 'q', type: 't' })) }).success;
    expect([batchOf(LIMITS.batchJobs), batchOf(LIMITS.batchJobs + 1)]).toEqual([true, false]);
    const purgeOf = (batchSize: number) =>
      purgeBody.safeParse({ target: 'dlq', olderThan: '2026-01-01T00:00:00Z', batchSize }).success;
    expect([purgeOf(LIMITS.purgeBatchRows), purgeOf(LIMITS.purgeBatchRows + 1)]).toEqual([true, false]);
    const resurrectOf = (limit: number) => resurrectFilterBody.safeParse({ limit }).success;
    expect([resurrectOf(LIMITS.resurrectJobs), resurrectOf(LIMITS.resurrectJobs + 1)]).toEqual([true, false]);
    const windowOf = (m: number) => metricsQuery.safeParse({ windowMinutes: String(m) }).success;
    expect([windowOf(LIMITS.metricsWindowMinutes), windowOf(LIMITS.metricsWindowMinutes + 1)]).toEqual([true, false]);
  });
});

describe('the client package owns the enqueue rules', () => {
  it('is the module Keel validates with: the same ValidationError class and the same reserved key prefix', async () => {
    const client = await import('../../packages/client/src/index.js');
    const { SCHEDULE_KEY_PREFIX } = await import('../../shared/jobs/contract.js');
    // contract.ts may import nothing at run time (telemetry reads it), so it keeps its own copy of the prefix.
    expect(client.SCHEDULE_KEY_PREFIX).toBe(SCHEDULE_KEY_PREFIX);
    expect(client.ValidationError).toBe(ValidationError);
    expect(client.prepareEnqueue).toBe(prepareEnqueue);
    expect(client.LIMITS).toBe(LIMITS);
  });
});
