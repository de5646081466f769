// The shared result-row mappers: PostgreSQL's snake_case rows and SQL Server's PascalCase rows map to the same
// contract objects.
import { describe, expect, it } from 'vitest';
import {
  camelKeys,
  camelRows,
  toClaimedJob,
  toJobRecord,
  toQueueStats,
  toStartedJob,
  toStartedJobs,
} from '../../shared/jobs/rows.js';

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

  it("maps a claim's array rows (pg rowMode array) as toStartedJob maps its camelCase rows", () => {
    // claim_and_start's columns (times as epoch ms), in another order, with one unknown column and one missing
    const columns = [
      'attempt',
      'job_id',
      'lease_id',
      'queue',
      'type',
      'payload',
      'priority',
      'attempts',
      'max_attempts',
      'queue_max_attempts',
      'idempotency_key',
      'tags',
      'run_at',
      'created_at',
      'extra',
    ];
    const rows = [
      [
        2,
        '7',
        'AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE',
        'q',
        't',
        { a: 1 },
        2,
        1,
        null,
        5,
        'k',
        ['x'],
        1e12,
        1.5e12,
        'z',
      ],
      [1, '8', 'aaaaaaaa-bbbb-4ccc-8ddd-ffffffffffff', 'q', 't', null, 0, 0, 3, 5, null, null, 1e12, 1e12, null],
    ];
    const expected = camelRows(columns, rows).map((r) => toStartedJob(r, pgCodec));
    expect(toStartedJobs(columns, rows, pgCodec)).toEqual(expected);
    expect(expected[0]).toMatchObject({ id: '7', leaseId: 'aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee', attempt: 2 });
    expect(expected[1]).toMatchObject({ tags: [], maxAttempts: 3, idempotencyKey: null });
  });

  it('keeps a null queue lag null and counts as numbers', () => {
    const s = toQueueStats(
      camelKeys({ Queue: 'q', Pending: '3', Due: 1, DueExact: 1, OldestDueAgeMs: null, Succeeded: '10' }),
    );
    expect(s).toMatchObject({ queue: 'q', pending: 3, due: 1, dueExact: true, oldestDueAgeMs: null, succeeded: 10 });
    expect(toQueueStats(camelKeys({ Queue: 'q', Due: 1000, DueExact: false })).dueExact).toBe(false);
  });
});
