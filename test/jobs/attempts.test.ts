// The attempt entries of a job's log column, read the same way from every engine, and the timeline built from them.
import { describe, expect, it } from 'vitest';
import { jobTimeline, splitJobLog } from '../../shared/jobs/attempts.js';
import type { JobRecord } from '../../shared/jobs/contract.js';

const line = { attempt: 1, at: '2030-01-01T00:00:00.000Z', level: 'info', message: 'hello' };

function record(over: Partial<JobRecord>): JobRecord {
  return {
    id: '7',
    location: 'hot',
    queue: 'q',
    type: 't',
    payload: null,
    priority: 0,
    state: 'pending',
    attempts: 0,
    idempotencyKey: null,
    tags: [],
    createdAt: new Date('2030-01-01T00:00:00Z'),
    runAt: null,
    startedAt: null,
    finishedAt: null,
    durationMs: null,
    reason: null,
    lastError: null,
    cancelRequested: false,
    leaseId: null,
    workerId: null,
    progress: null,
    maxAttempts: null,
    leaseExpiresAt: null,
    heartbeatAt: null,
    ...over,
  };
}

describe('splitJobLog', () => {
  it('separates ctx.log lines from attempt entries, each in stored order', () => {
    const { lines, attempts } = splitJobLog([
      line,
      {
        kind: 'attempt',
        attempt: 1,
        worker: 'w',
        startedAt: '2030-01-01T00:00:00.000Z',
        endedAt: '2030-01-01T00:00:01.500Z',
        outcome: 'retried',
        error: 'boom',
      },
      { ...line, message: 'second' },
    ]);
    expect(lines).toEqual([line, { ...line, message: 'second' }]);
    expect(attempts).toEqual([
      {
        attempt: 1,
        worker: 'w',
        startedAt: '2030-01-01T00:00:00.000Z',
        endedAt: '2030-01-01T00:00:01.500Z',
        outcome: 'retried',
        error: 'boom',
      },
    ]);
  });

  it("reads SQL Server's times (CONVERT style 126 with a Z; with or without milliseconds) and nulls alike", () => {
    const { attempts } = splitJobLog([
      {
        kind: 'attempt',
        attempt: 2,
        worker: null,
        startedAt: '2030-01-01T00:00:00Z',
        endedAt: '2030-01-01T00:00:02.25',
        outcome: 'zombie',
        error: null,
      },
      { kind: 'attempt', attempt: 3, startedAt: null, outcome: 'fatal' },
    ]);
    expect(attempts[0]).toMatchObject({ startedAt: '2030-01-01T00:00:00.000Z', endedAt: '2030-01-01T00:00:02.250Z' });
    expect(attempts[1]).toEqual({
      attempt: 3,
      worker: null,
      startedAt: null,
      endedAt: null,
      outcome: 'fatal',
      error: null,
    });
    expect(splitJobLog(null)).toEqual({ lines: [], attempts: [] });
  });
});

describe('jobTimeline', () => {
  const failed = {
    attempt: 1,
    worker: 'w1',
    startedAt: '2030-01-01T00:00:00.000Z',
    endedAt: '2030-01-01T00:00:01.000Z',
    outcome: 'retried' as const,
    error: 'boom',
  };

  it('adds the archived success from the row itself', () => {
    const job = record({
      location: 'archive',
      state: 'succeeded',
      attempts: 2,
      workerId: 'w2',
      startedAt: new Date('2030-01-01T00:00:05Z'),
      finishedAt: new Date('2030-01-01T00:00:06Z'),
      attemptLog: [failed],
    });
    expect(jobTimeline(job)).toEqual([
      failed,
      {
        attempt: 2,
        worker: 'w2',
        startedAt: '2030-01-01T00:00:05.000Z',
        endedAt: '2030-01-01T00:00:06.000Z',
        outcome: 'succeeded',
        error: null,
      },
    ]);
  });

  it('adds the running attempt of a processing job; a pending, fetched or dead job adds none', () => {
    const running = record({
      state: 'processing',
      attempts: 2,
      workerId: 'w2',
      startedAt: new Date('2030-01-01T00:00:05Z'),
      attemptLog: [failed],
    });
    expect(jobTimeline(running).map((a) => `${a.attempt}:${a.outcome}:${a.endedAt}`)).toEqual([
      '1:retried:2030-01-01T00:00:01.000Z',
      '2:running:null',
    ]);
    expect(jobTimeline(record({ state: 'pending', attempts: 1, attemptLog: [failed] }))).toEqual([failed]);
    expect(jobTimeline(record({ state: 'fetched', attempts: 1 }))).toEqual([]);
    expect(
      jobTimeline(
        record({ location: 'dlq', state: 'dead', attempts: 1, attemptLog: [{ ...failed, outcome: 'fatal' }] }),
      ),
    ).toEqual([{ ...failed, outcome: 'fatal' }]);
  });
});
