// What the ops API's body check (shared/ops/jsonText.ts) finds that JSON.parse would change without a word.
import { describe, expect, it } from 'vitest';
import { silentChange } from '../../shared/ops/jsonText.js';

describe('silentChange', () => {
  it('names a key given twice, at any depth', () => {
    expect(silentChange('{"a":1,"a":2}')).toEqual({ kind: 'duplicate', field: 'a' });
    expect(silentChange('{"jobs":[{"x":1},{"t":"a","t":"b"}]}')).toEqual({ kind: 'duplicate', field: 'jobs[1].t' });
  });

  it('names an integer a double cannot hold, and only such an integer', () => {
    expect(silentChange('{"p":{"ids":[1,9007199254740993]}}')).toEqual({
      kind: 'inexact',
      field: 'p.ids[1]',
      literal: '9007199254740993',
    });
    expect(silentChange('{"n":-12345678901234567890}')).toMatchObject({ kind: 'inexact', field: 'n' });
    expect(silentChange('12345678901234567890')).toMatchObject({ kind: 'inexact', field: '' });
    // Held exactly: the largest safe integer, 2^54, 2^63 as a double prints it; fractions and exponents are decimals
    // the caller wrote as such; digits inside strings are text.
    for (const ok of [
      '{"n":9007199254740991}',
      '{"n":-9007199254740991}',
      '{"n":18014398509481984}',
      '{"n":9223372036854775808}',
      '{"n":1.2345678901234567890}',
      '{"n":12345678901234567890e0}',
      '{"n":"12345678901234567890"}',
      '{"12345678901234567890":1}',
      '[0,-0,1e400,true,null]',
    ])
      expect(silentChange(ok), ok).toBeNull();
  });
});
