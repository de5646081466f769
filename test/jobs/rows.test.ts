// The shared result-row mappers: PostgreSQL's snake_case rows and SQL Server's PascalCase rows map to the same
// contract objects.
import { describe, expect, it } from 'vitest';
import { camelKeys, toClaimedJob, toJobRecord, toQueueStats } from '../../shared/jobs/rows.js';

const pgCodec = { payload: (v: unknown) => v, tags: (v: unknown) => (v as string[] | null) ?? [] };
const textCodec = {
  payload: (v: unknown) => (v === null ? null : JSON.parse(String(v))),
  tags: (v: unknown) => (v === null ? [] : JSON.parse(String(v))),
};

describe('job result rows', () => {
  it('camel-cases snake_case and PascalCase keys alike', () => {
    expect(camelKeys({ job_id: 1, oldest_due_age_ms: 2, status: 'ok' })).toEqual({
      jobId: 1,
      oldestDueAgeMs: 2,
      status: 'ok',
    });
    expect(camelKeys({ JobId: 1, OldestDueAgeMs: 2, Status: 'ok', Dlq: 3 })).toEqual({
      jobId: 1,
      oldestDueAgeMs: 2,
      status: 'ok',
      dlq: 3,
    });
  });

  it('maps a claimed job and a job record the same from either engine', () => {
    const when = '2026-11-30T01:00:00.000Z';
    const pgRow = {
      job_id: '7',
      lease_id: 'aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee',
      queue: 'q',
      type: 't',
      payload: { a: 1 },
      priority: 2,
      attempts: 1,
      max_attempts: null,
      queue_max_attempts: 5,
      idempotency_key: 'k',
      tags: ['x'],
      run_at: when,
      created_at: when,
      lease_expires_at: when,
    };
    const mssqlRow = {
      JobId: '7',
      LeaseId: 'AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE',
      Queue: 'q',
      Type: 't',
      Payload: '{"a":1}',
      Priority: 2,
      Attempts: 1,
      MaxAttempts: null,
      QueueMaxAttempts: 5,
      IdempotencyKey: 'k',
      Tags: '["x"]',
      RunAt: new Date(when),
      CreatedAt: new Date(when),
      LeaseExpiresAt: new Date(when),
    };
    const a = toClaimedJob(camelKeys(pgRow), pgCodec);
    expect(toClaimedJob(camelKeys(mssqlRow), textCodec)).toEqual(a);
    expect(a).toMatchObject({
      id: '7',
      leaseId: 'aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee',
      payload: { a: 1 },
      tags: ['x'],
      maxAttempts: null,
      queueMaxAttempts: 5,
    });
    const rec = toJobRecord(
      camelKeys({ ...pgRow, location: 'dlq', state: 'dead', reason: 'fatal', duration_ms: null, last_error: 'e' }),
      pgCodec,
    );
    expect(rec).toMatchObject({
      location: 'dlq',
      reason: 'fatal',
      durationMs: null,
      lastError: 'e',
      startedAt: null,
      leaseId: 'aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee',
    });
  });

  it('keeps a null queue lag null and counts as numbers', () => {
    const s = toQueueStats(
      camelKeys({ Queue: 'q', Pending: '3', Due: 1, DueExact: 1, OldestDueAgeMs: null, Succeeded: '10' }),
    );
    expect(s).toMatchObject({ queue: 'q', pending: 3, due: 1, dueExact: true, oldestDueAgeMs: null, succeeded: 10 });
    expect(toQueueStats(camelKeys({ Queue: 'q', Due: 1000, DueExact: false })).dueExact).toBe(false);
  });
});
