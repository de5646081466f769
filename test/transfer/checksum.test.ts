// The keel-v1 checksum: PostgreSQL's SQL implementation equals the TypeScript one (used for SQL Server sources
// and Oracle targets) on awkward values, and driver values normalize to the documented canonical texts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase } from '../support/pg.js';
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { from as copyFrom } from 'pg-copy-streams';
import {
  ChecksumAccumulator,
  LOGICAL_TYPES,
  canonicalValue,
  copyTextHashing,
  rowEncoding,
  rowHash,
  type CanonicalRow,
  type LogicalType,
} from '../../shared/transfer/checksum.js';
import { CopyTextSums, md5Prefix } from '../../shared/transfer/md5.js';
import { PostgresTransferSource } from '../../shared/engines/postgres/transferSource.js';
import {
  copyText,
  PG_CHECKSUM_SETTINGS_SQL,
  pgCanonical,
  pgChecksumQuery,
  pgReadBackSums,
} from '../../shared/engines/postgres/transferSql.js';
import { quotePg } from '../../shared/transfer/identifiers.js';
import { parseTransfers } from '../../shared/transfer/config.js';
import { transferEngineRules } from '../../shared/engines/registry.js';

const TRANSFER_RULES = transferEngineRules();

// Values that quote a record literal's field, are doubled in it, are escaped in COPY text, are empty, multi-byte,
// astral or lone surrogates, or longer than the hashers' reused buffers.
const AWKWARD_TEXTS: readonly string[] = [
  ...['"', '\\', '(', ')', ',', ' ', '\t', '\n', '\v', '\f', '\r'].flatMap((c) => [c, `a${c}b`, `${c}${c}x`]),
  '',
  'a\ud800b',
  '\udc00',
  'x\ud83d',
  '\ud83d\ude00 "q" \\',
  'ü✓𝄞',
  'z'.repeat(20000) + '"\t',
  '\u007f\u0080\u07ff\u0800\uffff',
  'plain',
];

describe('keel-v1 checksum', () => {
  let pool: pg.Pool;
  const COLS = ['id', 'big', 'amount', 'label', 'code', 'flag', 'day', 'at', 'at_tz', 'raw', 'ref'];
  // public.awkward's declared types (format_type), as the target's prepare reads them.
  const AWKWARD_DECLARED = [
    'integer',
    'bigint',
    'numeric(20,6)',
    'text',
    'character varying(20)',
    'boolean',
    'date',
    'timestamp(6) without time zone',
    'timestamp with time zone',
    'bytea',
    'uuid',
  ];
  // public.awkward's logical types, as readSchema maps them.
  const AWKWARD_LOGICAL: LogicalType[] = [
    'int',
    'int',
    'decimal',
    'text',
    'text',
    'bool',
    'date',
    'timestamp',
    'timestamptz',
    'bytes',
    'uuid',
  ];
  // A PostgreSQL transfer of `table` into public.awkward by id, over `cols` (each the same name on both sides).
  const awkwardTransfer = (name: string, table: string, cols = COLS) =>
    parseTransfers(
      [
        {
          name,
          source: { engine: 'postgres', connectionSetting: 'X', table },
          target: { engine: 'postgres', connectionSetting: 'Y', table: 'public.awkward' },
          keyColumns: ['id'],
          boundary: { column: 'id', kind: 'key' },
          columns: cols.map((c) => ({ source: c, target: c })),
        },
      ],
      TRANSFER_RULES,
    )[0]!;
  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: await createTestDatabase('tr_checksum'), max: 2 });
    await pool.query(`create table public.awkward (
      id integer primary key, big bigint, amount numeric(20,6), label text, code varchar(20), flag boolean,
      day date, at timestamp(6), at_tz timestamptz, raw bytea, ref uuid)`);
    await pool.query(`insert into public.awkward values
      (1, 9223372036854775807, 1.500000, 'plain', 'a', true, '2026-02-03', '2026-02-03 04:05:06.000007', '2026-02-03 04:05:06.5+02', '\\x00ff10', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'),
      (2, -42, -0.000100, '', '', false, '1999-12-31', '1999-12-31 23:59:59', '1999-12-31 23:59:59.999999+00', '\\x', null),
      (3, 0, 0, 'quote " back \\ paren ( ) comma , end', ' lead', null, null, null, null, null, null),
      (4, null, 100, E'tab\\tnew\\nline\\rcr\\x0bvt\\x0cff', 'ünïcødé ✓ 𝄞', true, '2026-01-01', '2026-01-01 00:00:00', '2026-01-01 00:00:00+00', '\\x5c22', '00000000-0000-0000-0000-000000000000'),
      (5, 1, 123456789012.123456, 'NULL', 'null', false, '0001-01-01', '2000-02-29 12:00:00.1', '2000-02-29 12:00:00.1-05:30', '\\xdeadbeef', 'ffffffff-ffff-ffff-ffff-ffffffffffff')`);
  });
  afterAll(async () => {
    await pool?.end();
  });

  it('PostgreSQL SQL and TypeScript compute the same value', async () => {
    const t = awkwardTransfer('awkward', 'public.awkward');
    const src = new PostgresTransferSource(t, pool);
    const schema = await src.readSchema();
    expect(schema.columns.map((c) => c.logical)).toEqual(AWKWARD_LOGICAL);
    const w = { kind: 'key' as const, low: null, high: '5' };
    const manifest = await src.manifest(w, schema, 'keel-v1');
    const acc = new ChecksumAccumulator();
    const seen: (string | null)[][] = [];
    for await (const chunk of src.streamRows(w, schema, 2))
      for (const row of chunk) {
        acc.add(row);
        seen.push(row);
      }
    expect(acc.count).toBe(5);
    expect(manifest).toEqual({ rowCount: 5, checksum: acc.checksum });
    // Canonical texts as documented.
    expect(seen[0]).toEqual([
      '1',
      '9223372036854775807',
      '1.5',
      'plain',
      'a',
      't',
      '2026-02-03',
      '2026-02-03T04:05:06.000007',
      '2026-02-03T02:05:06.500000Z',
      '00ff10',
      'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    ]);
    expect(seen[1]!.slice(0, 3)).toEqual(['2', '-42', '-0.0001']);
    // Per-row hashes agree too (not just the sum).
    for (const row of seen) {
      const r = await pool.query(`select row(${row.map((_v, i) => `$${i + 1}::text`).join(', ')})::text as enc`, row);
      expect(rowEncoding(row)).toBe(r.rows[0].enc);
    }
  });

  it('copyText of canonical rows of every type (escapes tested only where text or bytes can need them) reads back as the same rows', async () => {
    const t = awkwardTransfer('awkward_copy', 'public.awkward');
    const src = new PostgresTransferSource(t, pool);
    const schema = await src.readSchema();
    const rows: (string | null)[][] = [];
    for await (const chunk of src.streamRows({ kind: 'key', low: null, high: '5' }, schema, 2)) rows.push(...chunk);
    const text = copyText(
      rows,
      schema.columns.map((c) => c.logical),
    );
    expect(text).toContain('tab\\tnew\\nline\\rcr'); // text escaped
    expect(text).toContain('\\\\x5c22'); // bytes: \x, escaped
    expect(text.split('\n')[2]).toContain('\t\\N\t'); // NULL of a non-text column
    await pool.query('create table public.awkward_back (like public.awkward)');
    const client = await pool.connect();
    try {
      await pipeline(Readable.from([text]), client.query(copyFrom('copy public.awkward_back from stdin')));
    } finally {
      client.release();
    }
    const back = await pool.query<{ r: (string | null)[] }>(
      `select array[${schema.columns.map((c) => pgCanonical(quotePg(c.name), c.logical, c.type)).join(', ')}] as r from public.awkward_back order by id`,
    );
    expect(back.rows.map((r) => r.r)).toEqual(rows);
    // The one-pass writer (an announced chunk, as the one-read feed announces it): the same bytes, and the chunk's
    // keel-v1 sum, which the server's keel-v1 of the rows the bytes stored equals.
    const types = schema.columns.map((c) => c.logical);
    const chunk: CanonicalRow[] = rows.map((r) => [...r]);
    const acc = new ChecksumAccumulator();
    acc.expect(chunk);
    const bytes = copyTextHashing(chunk, types);
    expect(bytes).not.toBeNull();
    expect(bytes!.equals(Buffer.from(text, 'utf8'))).toBe(true);
    acc.addChunk(chunk);
    const perRow = new ChecksumAccumulator();
    for (const r of rows) perRow.add(r);
    expect([acc.count, acc.checksum]).toEqual([perRow.count, perRow.checksum]);
    await pool.query('create table public.awkward_back2 (like public.awkward)');
    const c2 = await pool.connect();
    try {
      await pipeline(Readable.from([bytes!]), c2.query(copyFrom('copy public.awkward_back2 from stdin')));
    } finally {
      c2.release();
    }
    const back2 = new PostgresTransferSource(awkwardTransfer('awkward_back2', 'public.awkward_back2'), pool);
    const stored = await back2.manifest({ kind: 'key', low: null, high: '5' }, await back2.readSchema(), 'keel-v1');
    expect(stored).toEqual({ rowCount: 5, checksum: acc.checksum });
  });

  it('copyTextHashing: copyText bytes and keel-v1 row hashes in one pass, for every logical type and awkward value', () => {
    // Values that quote the record literal, are doubled in it, are escaped in COPY text, are empty, NULL, multi-byte,
    // astral or lone surrogates, in a column of every logical type: the hash follows the record literal of the strings
    // whatever the type (the definition), the COPY text copyText's escaping by type (text and bytes only).
    const odd = [...AWKWARD_TEXTS, '-42', '2026-02-03T04:05:06.000007Z', '00ff10'];
    const types = LOGICAL_TYPES;
    const rows: CanonicalRow[] = [];
    for (let i = 0; i < odd.length * 3; i++)
      rows.push(types.map((_t, j) => ((i + j) % 5 === 4 ? null : odd[(i * 7 + j * 3) % odd.length]!)));
    rows.push(
      types.map(() => null),
      types.map(() => ''),
      types.map((_t, j) => odd[j]!),
    );
    const text = copyText(rows, types);
    expect(text).toContain('\\\\x'); // a bytes value behind its \\x prefix
    const perRow = new ChecksumAccumulator();
    for (const r of rows) perRow.add(r);
    let sum = 0n;
    for (const r of rows) sum = (sum + rowHash(r)) % (1n << 64n);
    expect(perRow.checksum).toBe(sum.toString());
    // Chunk by chunk, as the feed announces them; several chunks so the sums carry across them.
    const acc = new ChecksumAccumulator();
    const parts: Buffer[] = [];
    for (let i = 0; i < rows.length; i += 17) {
      const chunk = rows.slice(i, i + 17);
      acc.expect(chunk);
      const bytes = copyTextHashing(chunk, types);
      expect(bytes).not.toBeNull();
      parts.push(bytes!);
      expect(copyTextHashing(chunk, types)).toBeNull(); // hashed once: a second write formats as before
      acc.addChunk(chunk);
    }
    expect(Buffer.concat(parts).equals(Buffer.from(text, 'utf8'))).toBe(true);
    expect([acc.count, acc.checksum]).toEqual([rows.length, perRow.checksum]);
    // Not announced: nothing is hashed (the caller formats with copyText); announced but never written: addChunk hashes.
    expect(copyTextHashing(rows.slice(0, 3), types)).toBeNull();
    const unwritten = new ChecksumAccumulator();
    const chunk = rows.slice(0, 40);
    unwritten.expect(chunk);
    unwritten.addChunk(chunk);
    const direct = new ChecksumAccumulator();
    for (const r of chunk) direct.add(r);
    expect([unwritten.count, unwritten.checksum]).toEqual([40, direct.checksum]);
    // A row of another width than the types: left to addChunk's rows (its own fields), never a sum of the wrong literal.
    const ragged: CanonicalRow[] = [types.map(() => 'x'), ['only', 'two']];
    const r1 = new ChecksumAccumulator();
    r1.expect(ragged);
    expect(copyTextHashing(ragged, types)).toBeNull();
    r1.addChunk(ragged);
    expect(r1.checksum).toBe(((rowHash(ragged[0]!) + rowHash(ragged[1]!)) % (1n << 64n)).toString());
  });

  it("pgReadBackSums: keel-v1 of stored rows read back as COPY text equals the server's md5() keel-v1, for every type and awkward value", async () => {
    // What the PostgreSQL target's check reads back (direct apply and staging): each type's canonical text, every
    // awkward text (quoting, doubling, COPY's escapes \b \f \n \r \t \v and \\, other control characters COPY
    // sends raw, empty, NULL, the text '\N', multi-byte, astral, long), a date/time outside the canonical range (its
    // '!' mark). Equal to pgChecksumQuery's keel-v1 of the same rows, and to ChecksumAccumulator of their texts.
    const odd = [...AWKWARD_TEXTS, '\b', 'a\u0001\u001fb\u0008', '\\N', 'N'];
    await pool.query('create table public.readback (id integer primary key, a text, b varchar(30), c char(4))');
    await pool.query(
      `insert into public.readback select o::int, a, b, c from unnest($1::text[], $2::text[], $3::text[]) with ordinality u(a, b, c, o)`,
      [
        odd,
        odd.map((v, i) => (i % 3 === 0 ? null : v.slice(0, 30))),
        odd.map((v, i) => (i % 4 === 1 ? null : v.slice(0, 4))),
      ],
    );
    const client = await pool.connect();
    try {
      // The session's own settings differ from the check's (its transaction sets them, as the direct apply and the
      // staging do; pgReadBackSums sets TimeZone and DateStyle itself).
      await client.query(`set timezone = 'Asia/Kolkata'; set datestyle = 'SQL, DMY'`);
      await client.query(`begin; ${PG_CHECKSUM_SETTINGS_SQL}`);
      const tables: [string, { ref: string; type: LogicalType; declared?: string }[]][] = [
        [
          'public.readback',
          [
            { ref: 'id', type: 'int' },
            { ref: 'a', type: 'text', declared: 'text' },
            { ref: 'b', type: 'text', declared: 'character varying(30)' },
            { ref: 'c', type: 'text', declared: 'character(4)' },
          ],
        ],
        [
          'public.awkward',
          COLS.map((c, i) => ({
            ref: c,
            declared: AWKWARD_DECLARED[i],
            type: AWKWARD_LOGICAL[i]!,
          })),
        ],
      ];
      await client.query(
        `insert into public.awkward (id, day, at, at_tz) values (6, 'infinity', '10000-01-01', '0044-03-15 12:00+00 BC')`,
      );
      for (const [table, cols] of tables) {
        const server = (await client.query(pgChecksumQuery(cols, table, 'true'))).rows[0];
        const back = await pgReadBackSums(client, cols, table, 'true', {});
        expect(back, table).toEqual({ rowCount: Number(server.n), checksum: String(server.checksum) });
        const texts = await client.query<{ r: CanonicalRow }>(
          `select array[${cols.map((c) => pgCanonical(c.ref, c.type, c.declared)).join(', ')}] as r from ${table}`,
        );
        const acc = new ChecksumAccumulator();
        for (const r of texts.rows) acc.add(r.r);
        expect(back).toEqual({ rowCount: acc.count, checksum: acc.checksum });
      }
      // Dates and times printed by the server and made canonical in Node (a column of its own declared type), against
      // to_char's text value by value: every fraction length, years 1 and 9999, the ends of the range each side,
      // offsets that cross a day or the range's ends, BC, infinities; a timestamp column read as timestamptz (another
      // declared type: its canonical text from the server, as before).
      const times = [
        ['0001-01-01', '0001-01-01 00:00:00', '0001-01-01 00:00:00+00'],
        ['0999-12-31', '0001-01-01 00:00:00.000001', '0001-01-01 00:00:00.000001+00'],
        ['1000-01-01', '0999-12-31 23:59:59.5', '0999-12-31 23:59:59.5+00'],
        ['2000-02-29', '2026-02-03 04:05:06.1', '2000-01-01 00:30:00+05:30'],
        ['9999-12-31', '2026-02-03 04:05:06.12', '2026-02-03 04:05:06.123-08'],
        ['10000-01-01', '2026-02-03 04:05:06.1234', '1899-12-31 23:59:59.999999+00'],
        ['0044-03-15 BC', '2026-02-03 04:05:06.12345', '1970-01-01 00:00:00+00'],
        ['infinity', '2026-02-03 04:05:06.123456', '9999-12-31 23:59:59.999999+00'],
        ['-infinity', '9999-12-31 23:59:59.999999', '9999-12-31 23:30:00-01'],
        [null, '10000-01-01 00:00:00', '0001-01-01 00:00:00+01'],
        [null, '0001-12-31 23:59:59 BC', '10000-01-01 00:00:00+00'],
        [null, 'infinity', '0044-03-15 12:00:00+00 BC'],
        [null, '-infinity', 'infinity'],
        [null, '294276-12-31 23:59:59', '-infinity'],
        ['1970-01-01', '1970-01-01 00:00:00', '2026-12-05 03:00:00.000100+00'],
      ];
      await client.query(`create table public.readback_time (
        id integer primary key, d date, ts timestamp, tz timestamptz, ts3 timestamp(3), tz0 timestamptz(0), ts_as_tz timestamp)`);
      await client.query(
        `insert into public.readback_time select o::int, d::date, ts::timestamp, tz::timestamptz, ts::timestamp(3),
                tz::timestamptz(0), ts::timestamp from unnest($1::text[], $2::text[], $3::text[]) with ordinality u(d, ts, tz, o)`,
        [times.map((r) => r[0]), times.map((r) => r[1]), times.map((r) => r[2])],
      );
      const timeCols: { ref: string; type: LogicalType; declared: string }[] = [
        { ref: 'id', type: 'int', declared: 'integer' },
        { ref: 'd', type: 'date', declared: 'date' },
        { ref: 'ts', type: 'timestamp', declared: 'timestamp without time zone' },
        { ref: 'tz', type: 'timestamptz', declared: 'timestamp with time zone' },
        { ref: 'ts3', type: 'timestamp', declared: 'timestamp(3) without time zone' },
        { ref: 'tz0', type: 'timestamptz', declared: 'timestamp(0) with time zone' },
        { ref: 'ts_as_tz', type: 'timestamptz', declared: 'timestamp without time zone' },
      ];
      for (let id = 1; id <= times.length; id++) {
        const server = (await client.query(pgChecksumQuery(timeCols, 'public.readback_time', `id = ${id}`))).rows[0];
        const back = await pgReadBackSums(
          client,
          timeCols,
          'public.readback_time',
          `id = current_setting('keel.t_id')::int`,
          {
            'keel.t_id': String(id),
          },
        );
        expect(back, `row ${id}: ${JSON.stringify(times[id - 1])}`).toEqual({
          rowCount: 1,
          checksum: String(server.checksum),
        });
      }
      const all = (await client.query(pgChecksumQuery(timeCols, 'public.readback_time', 'true'))).rows[0];
      expect(await pgReadBackSums(client, timeCols, 'public.readback_time', 'true', {})).toEqual({
        rowCount: times.length,
        checksum: String(all.checksum),
      });
      await client.query('rollback');
    } finally {
      client.release();
    }
    // The COPY text in pieces split anywhere (every byte position of a multi-byte, escaped stream), and what a broken
    // stream is: a row of another width, an unfinished row, a field ending in a backslash.
    const rows: CanonicalRow[] = odd.map((v, i) => [String(i), i % 5 === 0 ? null : v, v.slice(0, 3)]);
    const bytes = Buffer.from(copyText(rows, ['int', 'text', 'text']), 'utf8');
    const whole = new ChecksumAccumulator();
    for (const r of rows) whole.add(r);
    const cuts = new Set<number>();
    for (let cut = 0; cut <= bytes.length; cut += 7) cuts.add(cut);
    for (let k = 0; k <= 16; k++) cuts.add(k).add(bytes.length - k); // every cut of the first and last row
    expect(bytes.subarray(-3).toString()).toBe('\tN\n'); // the last field one character (and the text 'N')
    for (const cut of cuts) {
      const sums = new CopyTextSums(3);
      sums.push(bytes.subarray(0, cut));
      sums.push(bytes.subarray(cut, cut + 1));
      sums.push(bytes.subarray(cut + 1));
      sums.end();
      expect([sums.count, sums.checksum]).toEqual([whole.count, whole.checksum]);
    }
    expect(() => new CopyTextSums(2).push(Buffer.from('1\ta\tb\n'))).toThrow(/3 fields, expected 2/);
    const unfinished = new CopyTextSums(2);
    unfinished.push(Buffer.from('1\ta'));
    expect(() => unfinished.end()).toThrow(/inside a row/);
    expect(() => new CopyTextSums(2).push(Buffer.from('1\ta\\\n'))).toThrow(/backslash/);
  });

  it('the JavaScript MD5 of the row hash equals node:crypto and PostgreSQL md5() at every block boundary and in UTF-8', async () => {
    const out = new Uint32Array(2);
    const inputs: string[] = [];
    // 55/56/63/64/119/120 bytes: where the padding needs a second block; multi-byte and astral characters; long text
    for (let n = 0; n <= 200; n++) inputs.push('x'.repeat(n));
    inputs.push('ü'.repeat(28), 'ü'.repeat(27) + 'x', '✓'.repeat(19), '𝄞'.repeat(14), 'é✓𝄞\t\n"'.repeat(50));
    inputs.push('y'.repeat(5000)); // longer than the reused buffer
    let seed = 7;
    for (let i = 0; i < 300; i++) {
      let s = '';
      const len = (seed = (seed * 1103515245 + 12345) % 2147483648) % 300;
      for (let j = 0; j < len; j++)
        s += String.fromCodePoint(((seed = (seed * 1103515245 + 12345) % 2147483648) % 0xd000) + 1);
      inputs.push(s);
    }
    for (const s of inputs) {
      md5Prefix(s, out);
      const d = createHash('md5').update(s, 'utf8').digest();
      expect([out[0], out[1]], `length ${s.length}`).toEqual([d.readUInt32BE(0), d.readUInt32BE(4)]);
    }
    const some = inputs.filter((_s, i) => i % 7 === 0);
    const r = await pool.query<{ h: string }>(
      `select left(md5(s), 16) as h from unnest($1::text[]) with ordinality u(s, o) order by o`,
      [some],
    );
    some.forEach((s, i) => {
      md5Prefix(s, out);
      expect(out[0]!.toString(16).padStart(8, '0') + out[1]!.toString(16).padStart(8, '0')).toBe(r.rows[i]!.h);
    });
    // The accumulator's sum equals the sum of rowHash (BigInt, node:crypto) mod 2^64, carries included.
    const acc = new ChecksumAccumulator();
    let sum = 0n;
    for (let i = 0; i < 2000; i++) {
      const row = [String(i), inputs[i % inputs.length]!, i % 3 === 0 ? null : 'z'];
      acc.add(row);
      sum = (sum + rowHash(row)) % (1n << 64n);
    }
    expect(acc.checksum).toBe(sum.toString());
    expect(acc.count).toBe(2000);
    // The accumulator writes the record literal itself (md5RowPrefix): every character that quotes a value, the
    // doubled ones, empty values, lone surrogates (UTF-8 of U+FFFD, as TextEncoder and Buffer write them), a row
    // of many NULLs and a value longer than the reused buffer, each against rowHash (rowEncoding, node:crypto).
    const odd = [...AWKWARD_TEXTS];
    const rows: CanonicalRow[] = [
      ...odd.map((v) => [v]),
      odd,
      [...odd].reverse().map((v, i) => (i % 2 ? null : v)),
      Array.from({ length: 500 }, () => null),
      [null, '', null],
      [],
    ];
    const oddAcc = new ChecksumAccumulator();
    let oddSum = 0n;
    for (const row of rows) {
      oddAcc.add(row);
      oddSum = (oddSum + rowHash(row)) % (1n << 64n);
      const one = new ChecksumAccumulator();
      one.add(row);
      expect(one.checksum, JSON.stringify(row).slice(0, 80)).toBe(rowHash(row).toString());
    }
    expect(oddAcc.checksum).toBe(oddSum.toString());
  });

  it('keel-pg1 and keel-pg2 agree across compatible declared types (integer/bigint, numeric(p,s)/numeric, varchar/text)', async () => {
    await pool.query(`create table public.awkward_wide (
      id bigint primary key, big numeric, amount numeric, label varchar(100), code text, flag boolean,
      day date, at timestamp, at_tz timestamptz, raw bytea, ref uuid)`);
    await pool.query(
      `insert into public.awkward_wide select id, big, amount, label, code, flag, day, at, at_tz, raw, ref from public.awkward`,
    );
    // bigint vs numeric: different logical types
    const mk = (table: string) =>
      awkwardTransfer(
        'awk',
        table,
        COLS.filter((c) => c !== 'big'),
      );
    const w = { kind: 'key' as const, low: null, high: '5' };
    for (const algorithm of ['keel-pg1', 'keel-pg2'] as const) {
      const narrow = new PostgresTransferSource(mk('public.awkward'), pool);
      const wide = new PostgresTransferSource(mk('public.awkward_wide'), pool);
      const a = await narrow.manifest(w, await narrow.readSchema(), algorithm);
      const b = await wide.manifest(w, await wide.readSchema(), algorithm);
      expect(a.checksum).toMatch(algorithm === 'keel-pg2' ? /^pg2:\d+$/ : /^pg1:\d+$/);
      expect(b).toEqual(a);
    }
  });

  it("keel-pg2 sees what the types' own hashes would miss: sign, 64-bit folding, scale-free numerics, char padding", async () => {
    const sum = async (
      type: string,
      declared: string,
      logical: Parameters<typeof pgChecksumQuery>[0][number]['type'],
      value: string,
    ) =>
      (
        await pool.query(
          pgChecksumQuery([{ ref: 'v', type: logical, declared }], `(select $1::${type} as v) s`, 'true', 'keel-pg2'),
          [value],
        )
      ).rows[0].checksum as string;
    expect(await sum('numeric', 'numeric', 'decimal', '5')).not.toBe(await sum('numeric', 'numeric', 'decimal', '-5'));
    expect(await sum('numeric(12,2)', 'numeric(12,2)', 'decimal', '1.5')).toBe(
      await sum('numeric', 'numeric', 'decimal', '1.50000'),
    );
    // hashint8 folds the high half onto the low half: 1 and 2^32 collide there, not here.
    expect(await sum('bigint', 'bigint', 'int', '1')).not.toBe(await sum('bigint', 'bigint', 'int', '4294967296'));
    expect(await sum('integer', 'integer', 'int', '7')).toBe(await sum('bigint', 'bigint', 'int', '7'));
    expect(await sum('timestamptz', 'timestamp with time zone', 'timestamptz', '2026-01-01 00:00:00+00')).not.toBe(
      await sum('timestamptz', 'timestamp with time zone', 'timestamptz', '2026-01-01 00:00:00.000001+00'),
    );
    // character(n) keeps its padding, like its printed form (keel-pg1): equal to the padded text, not the trimmed one.
    expect(await sum('character(5)', 'character(5)', 'text', 'ab')).toBe(await sum('text', 'text', 'text', 'ab   '));
    expect(await sum('character(5)', 'character(5)', 'text', 'ab')).not.toBe(await sum('text', 'text', 'text', 'ab'));
    expect(await sum('text', 'text', 'text', 'A')).not.toBe(await sum('text', 'text', 'text', 'a'));
  });

  it('normalizes driver values to canonical text by logical type', () => {
    expect(canonicalValue('int', 42n)).toBe('42');
    expect(canonicalValue('int', '-0007')).toBe('-7');
    expect(canonicalValue('int', '-0')).toBe('0');
    expect(() => canonicalValue('int', 2 ** 60)).toThrow(/exact range/);
    expect(canonicalValue('decimal', '1.50')).toBe('1.5');
    expect(canonicalValue('decimal', '.5')).toBe('0.5');
    expect(canonicalValue('decimal', '-.50')).toBe('-0.5');
    expect(canonicalValue('decimal', '-0.000')).toBe('0');
    expect(canonicalValue('decimal', '1E+3')).toBe('1000');
    expect(canonicalValue('decimal', '1.2e-3')).toBe('0.0012');
    expect(canonicalValue('decimal', 12.25)).toBe('12.25');
    expect(canonicalValue('bool', 1)).toBe('t');
    expect(canonicalValue('bool', false)).toBe('f');
    expect(canonicalValue('timestamp', '2026-02-03 04:05:06.1234567')).toBe('2026-02-03T04:05:06.123456');
    expect(canonicalValue('timestamp', '2026-02-03T04:05:06')).toBe('2026-02-03T04:05:06.000000');
    expect(canonicalValue('timestamptz', '2026-02-03 04:05:06.5+02:00')).toBe('2026-02-03T02:05:06.500000Z');
    expect(canonicalValue('timestamptz', new Date('2026-02-03T02:05:06.123Z'))).toBe('2026-02-03T02:05:06.123000Z');
    // Years 1..99 with an offset stay in the first century (Date.UTC alone would read them as 1900..1999), and an
    // offset that crosses midnight of 1 January of year 1 or 31 December 9999 moves the date, not the year's digits.
    expect(canonicalValue('timestamptz', '0050-06-01 10:00:00+02')).toBe('0050-06-01T08:00:00.000000Z');
    expect(canonicalValue('timestamptz', '0001-01-01 14:00:00+14:00')).toBe('0001-01-01T00:00:00.000000Z');
    expect(canonicalValue('timestamptz', '0099-12-31 23:30:00-01:00')).toBe('0100-01-01T00:30:00.000000Z');
    // a seven-digit fraction (SQL Server datetime2(7) / datetimeoffset(7)) is cut to six, never rounded up a second
    expect(canonicalValue('timestamptz', '9999-12-31 23:59:59.9999999 +00:00')).toBe('9999-12-31T23:59:59.999999Z');
    expect(canonicalValue('timestamptz', '2024-03-31 02:30:00.1234567 +02:00')).toBe('2024-03-31T00:30:00.123456Z');
    expect(canonicalValue('timestamp', '1900-01-01 00:00:00.0000001')).toBe('1900-01-01T00:00:00.000000');
    expect(canonicalValue('date', '1582-10-10')).toBe('1582-10-10');
    expect(canonicalValue('date', '2026-02-03 00:00:00')).toBe('2026-02-03');
    expect(canonicalValue('bytes', Buffer.from([0, 255]))).toBe('00ff');
    expect(canonicalValue('bytes', '0xDEAD')).toBe('dead');
    expect(canonicalValue('uuid', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11')).toBe('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11');
    expect(canonicalValue('text', null)).toBeNull();
    expect(rowEncoding([null, '', 'a b', 'x"y\\z', 'plain'])).toBe('(,"","a b","x""y\\\\z",plain)');
  });
});
