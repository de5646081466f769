// copyStreams.ts: the COPY TO parser gives the same bytes as pg-copy-streams wherever the socket cuts the messages,
// hands a framed stream on as whole CopyData messages only, gives pg back exactly what follows the COPY (or its
// error), and on a server forwards a table PG -> PG unchanged; a COPY that fails mid-stream is an error, never an end.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PassThrough } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { to as copyTo } from 'pg-copy-streams';
import { createTestDatabase } from '../support/pg.js';
import { copyIn, copyOut } from '../../shared/engines/postgres/copyStreams.js';

const msg = (code: string, body: Buffer | string): Buffer => {
  const b = typeof body === 'string' ? Buffer.from(body) : body;
  const head = Buffer.alloc(5);
  head[0] = code.charCodeAt(0);
  head.writeUInt32BE(b.length + 4, 1);
  return Buffer.concat([head, b]);
};

// A COPY OUT as the server sends it: CopyOutResponse, rows (one empty, one longer than a socket read) with a notice
// and a parameter status between them, CopyDone, then what pg reads next.
const payloads = [
  ...Array.from({ length: 40 }, (_, i) => Buffer.from(`${i}\tcustomer-${i}\t${'x'.repeat(i % 7)}\n`)),
  Buffer.alloc(0),
  Buffer.alloc(70_000, 0x61),
  Buffer.from('last\n'),
];
const rowMessages = payloads.map((p) => msg('d', p));
const afterCopy = Buffer.concat([msg('C', 'COPY 43\0'), msg('Z', 'I')]);
const wire = Buffer.concat([
  msg('H', Buffer.from([0, 0, 1, 0, 0])),
  ...rowMessages.slice(0, 10),
  msg('N', 'SNOTICE\0Mhello\0\0'),
  ...rowMessages.slice(10, 20),
  msg('S', 'application_name\0x\0'),
  ...rowMessages.slice(20),
  msg('c', ''),
  afterCopy,
]);
const errorResponse = msg('E', 'SERROR\0C22012\0Mdivision by zero\0\0');
const failingWire = Buffer.concat([
  msg('H', Buffer.from([0, 0, 1, 0, 0])),
  ...rowMessages.slice(0, 30),
  errorResponse,
  msg('Z', 'I'),
]);

// Feeds `parts` to a COPY TO stream as socket reads, with a stand-in connection that records what goes back to pg.
function feed(stream: ReturnType<typeof copyOut>, parts: Buffer[]) {
  const socket = new PassThrough();
  const backToPg: Buffer[] = [];
  socket.on('data', (b: Buffer) => backToPg.push(b));
  const pushed: Buffer[] = [];
  let ended = false;
  const s = stream as unknown as {
    push(b: Buffer | null): boolean;
    _parse(b: Buffer): boolean;
    submit(c: unknown): void;
  };
  s.push = (b) => (b === null ? (ended = true) : pushed.push(b), true);
  s.submit({ stream: socket, query: () => undefined });
  socket.pause();
  // Once the stream hands the connection back (its 'data' listener again), later reads are pg's.
  for (const p of parts)
    if (socket.listenerCount('data') > 0) backToPg.push(p);
    else s._parse(p);
  return { pushed, ended, backToPg: () => Buffer.concat(backToPg) };
}

// The CopyData messages of a framed chunk, or an error when it is not whole messages.
function wholeMessages(b: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let pos = 0; pos < b.length;) {
    expect(b[pos]).toBe(0x64);
    expect(pos + 5).toBeLessThanOrEqual(b.length);
    const end = pos + 1 + b.readUInt32BE(pos + 1);
    expect(end).toBeLessThanOrEqual(b.length);
    out.push(b.subarray(pos + 5, end));
    pos = end;
  }
  return out;
}

// Every cut into two reads, every third cut into three, and one byte a read.
function splits(b: Buffer): Buffer[][] {
  const out: Buffer[][] = [];
  for (let k = 0; k <= b.length; k += k < 600 || k > b.length - 600 ? 1 : 997)
    out.push([b.subarray(0, k), b.subarray(k)]);
  for (let k = 1; k < 400; k += 3) out.push([b.subarray(0, k), b.subarray(k, k + 7), b.subarray(k + 7)]);
  out.push(Array.from({ length: b.length }, (_, i) => b.subarray(i, i + 1)));
  return out;
}

describe('copyStreams: parsing what the socket delivered', () => {
  it('payload and framed streams carry the rows exactly, end at CopyDone and give pg back what follows, at every cut', () => {
    const expected = Buffer.concat(payloads);
    for (const parts of splits(wire)) {
      const p = feed(copyOut('x', 'payload'), parts);
      expect(p.ended).toBe(true);
      expect(Buffer.concat(p.pushed).equals(expected)).toBe(true);
      expect(p.backToPg().equals(afterCopy)).toBe(true);
      const f = feed(copyOut('x', 'framed'), parts);
      expect(f.ended).toBe(true);
      const rows = f.pushed.flatMap(wholeMessages);
      expect(rows.length).toBe(payloads.length);
      expect(Buffer.concat(rows).equals(expected)).toBe(true);
      expect(f.backToPg().equals(afterCopy)).toBe(true);
    }
  });

  it('an ErrorResponse mid-stream goes back to pg from its first byte and the stream does not end', () => {
    const expected = Buffer.concat(payloads.slice(0, 30));
    const rest = Buffer.concat([errorResponse, msg('Z', 'I')]);
    for (const parts of splits(failingWire)) {
      for (const mode of ['payload', 'framed'] as const) {
        const r = feed(copyOut('x', mode), parts);
        expect(r.ended).toBe(false);
        const got = mode === 'framed' ? Buffer.concat(r.pushed.flatMap(wholeMessages)) : Buffer.concat(r.pushed);
        expect(got.equals(expected)).toBe(true);
        expect(r.backToPg().equals(rest)).toBe(true);
      }
    }
  });
});

describe('copyStreams on a server', () => {
  let pool: pg.Pool;
  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: await createTestDatabase('copystreams'), max: 4 });
    await pool.query(`create table src (id bigint, t text, b bytea, ts timestamptz);
      insert into src select n, case when n % 5 = 0 then null else repeat(E'a\\tb\\\\c\\nd é ', n % 50) end,
             case when n = 7 then decode(repeat('ab', 300000), 'hex') else decode(md5(n::text), 'hex') end,
             timestamptz '2026-01-01' + n * interval '1 minute'
        from generate_series(1, 20000) n;
      create table dst (like src)`);
  });
  afterAll(async () => {
    await pool?.end();
  });

  for (const format of ['text', 'binary'] as const) {
    it(`forwards a table's CopyData messages into a COPY FROM unchanged (${format})`, async () => {
      const [a, b] = [await pool.connect(), await pool.connect()];
      try {
        await b.query('truncate dst');
        const opt = format === 'binary' ? ' (format binary)' : '';
        const out = a.query(copyOut(`copy src to stdout${opt}`, 'framed'));
        const sink = b.query(copyIn(`copy dst from stdin${opt}`));
        sink.acceptFramed();
        await pipeline(out, sink);
        const diff = await b.query(
          `select count(*)::int as n from ((table src except all table dst) union all (table dst except all table src)) d`,
        );
        expect(diff.rows[0].n).toBe(0);
        expect((await b.query('select count(*)::int as n from dst')).rows[0].n).toBe(20000);
        // both connections go on
        expect((await a.query('select 1 as one')).rows[0].one).toBe(1);
      } finally {
        a.release();
        b.release();
      }
    });
  }

  it('a payload stream reads the same bytes as pg-copy-streams', async () => {
    const c = await pool.connect();
    try {
      const read = async (s: NodeJS.ReadableStream) => {
        const parts: Buffer[] = [];
        for await (const d of s as AsyncIterable<Buffer>) parts.push(d);
        return Buffer.concat(parts);
      };
      const mine = await read(c.query(copyOut('copy src to stdout')));
      const theirs = await read(c.query(copyTo('copy src to stdout')));
      expect(mine.length).toBeGreaterThan(600_000);
      expect(mine.equals(theirs)).toBe(true);
    } finally {
      c.release();
    }
  });

  for (const mode of ['payload', 'framed'] as const) {
    it(`a COPY that fails mid-stream is an error, and the connection goes on (${mode})`, async () => {
      const c = await pool.connect();
      try {
        let rows = 0;
        const stream = c.query(copyOut(`copy (select id, 1 / (15000 - id) from src) to stdout`, mode));
        const read = (async () => {
          for await (const d of stream as AsyncIterable<Buffer>) rows += d.length;
        })();
        await expect(read).rejects.toThrow(/division by zero/);
        expect(rows).toBeGreaterThan(0);
        expect((await c.query('select 2 as two')).rows[0].two).toBe(2);
      } finally {
        c.release();
      }
    });
  }

  it('a target COPY fed by a source that fails mid-stream fails, and writes nothing', async () => {
    const [a, b] = [await pool.connect(), await pool.connect()];
    try {
      await b.query('truncate dst');
      await b.query('begin');
      const out = a.query(
        copyOut(`copy (select id, t, b, ts + (1 / (15000 - id)) * interval '0 s' from src) to stdout`, 'framed'),
      );
      const sink = b.query(copyIn('copy dst from stdin'));
      sink.acceptFramed();
      let forwarded = 0;
      out.on('data', (d: Buffer) => (forwarded += d.length));
      await expect(pipeline(out, sink)).rejects.toThrow(/division by zero/);
      expect(forwarded).toBeGreaterThan(100_000); // the target's COPY had rows before it failed
      await b.query('rollback').catch(() => undefined);
      expect((await b.query('select count(*)::int as n from dst')).rows[0].n).toBe(0);
    } finally {
      a.release();
      b.release(true);
    }
  });
});
