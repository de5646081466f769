// The store's int8[] parser (shared/engines/postgres/jobStore.ts) answers what pg's own parser answers, for the shape the
// job functions return (split) and for every other shape (pg's parser).
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { parseInt8Array } from '../../shared/engines/postgres/jobStore.js';

const pgParser = (pg.types.getTypeParser as (oid: number, format: 'text') => (v: string) => unknown)(1016, 'text');

describe('parseInt8Array', () => {
  it.each([
    '{}',
    '{1}',
    '{1,2,3}',
    '{9223372036854775807,-9223372036854775808,0}',
    '{1,NULL,3}',
    '{NULL}',
    '{{1,2},{3,4}}',
    '[0:1]={5,6}',
  ])('%s as pg parses it', (v) => {
    expect(parseInt8Array(v)).toEqual(pgParser(v));
  });

  it('answers strings, never numbers', () => {
    expect(parseInt8Array('{12345678901234567,2}')).toEqual(['12345678901234567', '2']);
  });
});
