import { describe, expect, it } from 'vitest';
import { PROGRESS_NOTE_MAX_CHARS, normalizeProgress, resultJson, resultsByIdJson } from '../../shared/jobs/progress.js';
import { fieldPath, jsonTextProblem, LIMITS } from '../../shared/jobs/validate.js';

describe('normalizeProgress', () => {
  it('takes a fraction, a count of a total (deriving the fraction) and a note', () => {
    expect(normalizeProgress(0.25)).toEqual({ fraction: 0.25, done: null, total: null, note: null });
    expect(normalizeProgress({ done: 3, total: 12 })).toEqual({ fraction: 0.25, done: 3, total: 12, note: null });
    expect(normalizeProgress({ done: 0, total: 0 })).toEqual({ fraction: 1, done: 0, total: 0, note: null });
    expect(normalizeProgress({ done: 7 })).toEqual({ fraction: null, done: 7, total: null, note: null });
    expect(normalizeProgress({ note: 'warming up' })).toEqual({
      fraction: null,
      done: null,
      total: null,
      note: 'warming up',
    });
    expect(normalizeProgress({ fraction: 0.5, done: 1, total: 10 }).fraction).toBe(0.5); // given wins over derived
  });

  it('refuses what is not progress, naming the field', () => {
    const field = (input: unknown) => {
      try {
        normalizeProgress(input as never);
      } catch (err) {
        return (err as { field?: string }).field;
      }
      return 'accepted';
    };
    expect(field(1.5)).toBe('progress.fraction');
    expect(field(-0.1)).toBe('progress.fraction');
    expect(field(Number.NaN)).toBe('progress.fraction');
    expect(field({ done: 5, total: 4 })).toBe('progress.done');
    expect(field({ total: Infinity })).toBe('progress.total');
    expect(field({ note: 'x'.repeat(PROGRESS_NOTE_MAX_CHARS + 1) })).toBe('progress.note');
    expect(field({ note: 3 })).toBe('progress.note');
    expect(field({ percent: 50 })).toBe('progress.percent');
    expect(field({})).toBe('progress');
    expect(field(null)).toBe('progress');
    expect(field([0.5])).toBe('progress');
    expect(field('0.5')).toBe('progress');
    // Counts are stored as JSON numbers: past 2^53 one may already have lost digits.
    expect(field({ done: 2 ** 53, total: 2 ** 54 })).toBe('progress.done');
    expect(field({ done: 1, total: 2 ** 60 })).toBe('progress.total');
    expect(field({ done: Number.MAX_SAFE_INTEGER, total: Number.MAX_SAFE_INTEGER })).toBe('accepted');
  });
});

describe('resultJson', () => {
  it('stores JSON values, and nothing for undefined or null', () => {
    expect(resultJson({ a: [1, 'x'] }, 100)).toBe('{"a":[1,"x"]}');
    expect(resultJson('ok', 100)).toBe('"ok"');
    expect(resultJson(0, 100)).toBe('0');
    expect(resultJson(undefined, 100)).toBeUndefined();
    expect(resultJson(null, 100)).toBeUndefined();
  });

  it('refuses values JSON cannot carry and results over the limit, naming the limit', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => resultJson(cyclic, 100)).toThrow(/^result: is not JSON/);
    expect(() => resultJson(10n, 100)).toThrow(/^result: is a BigInt/);
    expect(() => resultJson(() => 1, 100)).toThrow(/^result: is not JSON \(a function\)/);
    // What JSON.stringify would silently change (NaN, Infinity -> null) or throw on without a field (BigInt), and
    // integers past 2^53: refused naming the field, before anything is stored.
    const fieldOf = (value: unknown) => {
      try {
        resultJson(value, 10_000);
      } catch (err) {
        return `${(err as { field?: string }).field}: ${(err as Error).message}`;
      }
      return 'accepted';
    };
    expect(fieldOf({ rows: [1, 2, { n: Number.NaN }] })).toMatch(/^result\.rows\[2\]\.n: .*finite/);
    expect(fieldOf({ total: Infinity })).toMatch(/^result\.total: .*finite/);
    expect(fieldOf({ id: 2 ** 53 + 2 })).toMatch(/^result\.id: .*safe integer/);
    expect(fieldOf({ ids: [1n] })).toMatch(/^result\.ids\[0\]: .*BigInt/);
    expect(fieldOf({ n: Number.MAX_SAFE_INTEGER, x: 1.5e300 })).toBe('accepted');
    expect(() => resultJson('é'.repeat(60), 100)).toThrow(
      /is 122 bytes of JSON; the limit is 100 bytes \(KEEL_MAX_RESULT_BYTES\)/,
    );
  });
});

describe('resultJson checks what it writes, in one pass', () => {
  const fieldOf = (value: unknown) => {
    try {
      resultJson(value, 1_000_000);
    } catch (err) {
      return (err as Error).message; // "<field>: <why>"
    }
    return 'accepted';
  };
  const nest = (levels: number): unknown => {
    let v: unknown = 1;
    for (let i = 0; i < levels; i++) v = i % 2 ? [v] : { a: v };
    return v;
  };

  it("a toJSON's answer is checked, not the object it came from; a getter runs once", () => {
    // Two passes checked the object's own fields and stored what toJSON answered: a NUL (which jsonb refuses, failing
    // the completion of the whole batch) and an inexact integer went through.
    expect(fieldOf({ s: { toJSON: () => 'a\u0000b' } })).toMatch(/^result\.s: must not contain the NUL/);
    expect(fieldOf({ rows: [{ n: { toJSON: () => 2 ** 60 } }] })).toMatch(
      /^result\.rows\[0\]\.n: must be a safe integer/,
    );
    expect(fieldOf({ at: new Date(0) })).toBe('accepted');
    let reads = 0;
    expect(
      resultJson(
        {
          get g() {
            reads++;
            return 1;
          },
        },
        100,
      ),
    ).toBe('{"g":1}');
    expect(reads).toBe(1);
  });

  it("plain data: the same verdict as jsonTextProblem (the payload's rules), path and message", () => {
    const deep = nest(LIMITS.payloadDepth);
    const cases: unknown[] = [
      { a: 1, b: [1, 'x', { c: true }] },
      { 'k\u0000': 1 },
      { a: { b: ['ok', 'x\uD800'] } },
      [1, 2, Number.NaN],
      { a: [{ b: -(2 ** 53) - 2 }], c: 1n },
      { a: [1n], b: Infinity },
      deep,
      nest(LIMITS.payloadDepth + 1),
      { a: deep },
      'x\u0000',
      [[], {}, [[[]]]],
    ];
    for (const v of cases) {
      const p = jsonTextProblem(v);
      expect(fieldOf(v), JSON.stringify(p)).toBe(p ? `${fieldPath('result', p.path)}: ${p.message}` : 'accepted');
    }
  });
});

describe('resultsByIdJson', () => {
  it('is null for a batch without results, else an object of the results by job id', () => {
    expect(resultsByIdJson([{ jobId: '1' }, { jobId: '2' }])).toBeNull();
    const text = resultsByIdJson([
      { jobId: '1', resultJson: '{"a":1}' },
      { jobId: '2' },
      { jobId: '3', resultJson: '"x"' },
    ]);
    expect(JSON.parse(text!)).toEqual({ 1: { a: 1 }, 3: 'x' });
  });
});
