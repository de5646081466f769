import { describe, expect, it } from 'vitest';
import { AttemptLog, JOB_LOG_FIELDS_CHARS, JOB_LOG_MESSAGE_CHARS, jobLogLine } from '../../shared/jobs/jobLog.js';

describe('job log lines', () => {
  it('cuts long messages, keeps fields that fit, and notes the ones that do not instead of failing', () => {
    const at = new Date('2030-01-01T00:00:00Z');
    expect(jobLogLine(2, 'warn', 'hello', { a: 1 }, at)).toEqual({
      attempt: 2,
      at: '2030-01-01T00:00:00.000Z',
      level: 'warn',
      message: 'hello',
      fields: { a: 1 },
    });
    expect(jobLogLine(1, 'info', 'x'.repeat(JOB_LOG_MESSAGE_CHARS + 5), undefined, at).message).toHaveLength(
      JOB_LOG_MESSAGE_CHARS + 1,
    );
    expect(jobLogLine(1, 'info', 'm', { big: 'y'.repeat(JOB_LOG_FIELDS_CHARS) }, at).fields).toEqual({
      _dropped: `fields of ${JOB_LOG_FIELDS_CHARS + 10} characters`,
    });
    const cyclic: Record<string, unknown> = {};
    cyclic.c = cyclic;
    expect(jobLogLine(1, 'info', 'm', cyclic, at).fields).toEqual({ _dropped: 'fields are not JSON' });
  });

  it('an attempt log forwards every line to the process log and buffers at most maxLines, the newest', () => {
    const seen: unknown[] = [];
    const process = {
      info: (m: string, f?: Record<string, unknown>) => seen.push([m, f]),
      warn: () => undefined,
      error: () => undefined,
    };
    let wakes = 0;
    const log = new AttemptLog(process, '7', 3, 2, () => wakes++);
    log.info('one', { k: 1 });
    log.info('two');
    log.info('three');
    expect(seen[0]).toEqual(['one', { k: 1, jobId: '7', attempt: 3 }]);
    expect(wakes).toBe(3);
    expect(log.dropped).toBe(1);
    expect(log.take().map((l) => l.message)).toEqual(['two', 'three']);
    expect(log.take()).toEqual([]);
  });
});
