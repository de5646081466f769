// The store's text[] parser (shared/engines/postgres/jobStore.ts, a job's tags) answers what pg's own parser answers:
// for the shape it splits (no quote, no nested brace, no NULL) and for every other shape (pg's parser), and a claimed
// job's tags come back as they were enqueued whatever characters they hold.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseTextArray, type PostgresJobStore } from '../../shared/engines/postgres/jobStore.js';
import { PostgresHarness } from './postgres.harness.js';

const pgParser = (pg.types.getTypeParser as (oid: number, format: 'text') => (v: string) => unknown)(1009, 'text');

describe('parseTextArray', () => {
  it.each([
    '{}',
    '{a}',
    '{nightly,billing,eu-west}',
    '{"",x}',
    '{"a,b",c}',
    '{"say \\"hi\\"",x}',
    '{"back\\\\slash"}',
    '{"with space",x}',
    '{NULL,x}',
    '{"NULL",x}',
    '{"null"}',
    '{{a,b},{c,d}}',
    '[0:1]={a,b}',
    '{"{brace}"}',
    '{héllo,日本}',
  ])('%s as pg parses it', (v) => {
    expect(parseTextArray(v)).toEqual(pgParser(v));
  });
});

describe('postgres tags through a claim', () => {
  const h = new PostgresHarness();
  let store: PostgresJobStore;
  let admin: pg.Client;

  beforeAll(async () => {
    store = await h.createStore({ poolSize: 1 });
    admin = await h.connectOwner();
  });
  afterAll(async () => {
    await h.close();
  });

  it('reads back every tag as enqueued, and the server output each shape comes from', async () => {
    const queue = `tags-${Date.now()}`;
    const tagSets = [
      [],
      ['nightly'],
      ['nightly', 'billing', 'eu-west'],
      ['a,b', 'c'],
      ['say "hi"', 'back\\slash'],
      ['with space', '\ttab'],
      ['NULL', 'null', 'Null'],
      ['{brace}', '}', '{'],
      ['héllo', '日本'],
    ];
    await store.enqueueMany(tagSets.map((tags, i) => ({ queue, type: 't', payload: { i }, tags })));
    const jobs = await store.claimAndStart({ workerId: 'w', queues: [queue], limit: tagSets.length });
    expect(jobs).toHaveLength(tagSets.length);
    for (const job of jobs) expect(job.tags).toEqual(tagSets[(job.payload as { i: number }).i]);
    // Each set's text form as the server writes it, read by this parser and pg's alike (with an empty string and a
    // NULL element, which no tag can be).
    for (const tags of [...tagSets, ['', 'x'], [null, 'x']]) {
      const { rows } = await admin.query<{ out: string }>('select $1::text[]::text as out', [tags]);
      expect(parseTextArray(rows[0]!.out)).toEqual(tags);
      expect(parseTextArray(rows[0]!.out)).toEqual(pgParser(rows[0]!.out));
    }
  });
});
