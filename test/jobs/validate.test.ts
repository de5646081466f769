// The hand-written fast check of enqueue requests must accept exactly what the schema accepts.
import { describe, expect, it } from 'vitest';
import { MAX_BATCH, ValidationError, plainValid, prepareEnqueue } from '../../shared/jobs/validate.js';

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
];

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

  it('takes up to MAX_BATCH (20,000) jobs per call', () => {
    expect(MAX_BATCH).toBe(20_000);
    expect(prepareEnqueue(Array.from({ length: MAX_BATCH }, () => base))).toHaveLength(MAX_BATCH);
    expect(() => prepareEnqueue(Array.from({ length: MAX_BATCH + 1 }, () => base))).toThrow(/at most 20000 jobs/);
  });
});
