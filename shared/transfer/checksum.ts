// The batch checksum, version 1 ("keel-v1"). Source and target must compute the same value from the same rows,
// whatever engine they run on, so the definition is over a canonical TEXT form of each value, chosen by the
// column's logical type (see LogicalType), never by a driver's JavaScript representation:
//
//   int          optional '-', digits, no leading zeros               e.g. "-42", "0"
//   decimal      like int, then '.' and the fraction without trailing zeros; no '.' when the fraction is 0
//   float        a binary double written like decimal: the shortest decimal that reads back as the same double
//                (JavaScript's Number#toString digits, PostgreSQL's float8out), without exponent; NaN and
//                infinities have no canonical text and are refused. Only through a declared `float` policy
//                (shared/transfer/policies.ts): a float source column is refused otherwise.
//   text         the string itself (hashed as UTF-8); a fixed-width char(n) value with its blank padding, as stored
//   bool         "t" or "f"
//   date         YYYY-MM-DD
//   timestamp    YYYY-MM-DDTHH:MM:SS.ffffff            (always six fraction digits, no zone)
//   timestamptz  YYYY-MM-DDTHH:MM:SS.ffffffZ           (UTC)
//   bytes        lowercase hex
//   uuid         lowercase 8-4-4-4-12
//
// Row encoding: the canonical texts of the mapped columns, in mapping order, written as a PostgreSQL record literal
// (what `row(t1, t2, ...)::text` prints for text values): "(" + fields joined by "," + ")", where a NULL is an
// empty field, and a value is wrapped in double quotes (with " and \ doubled inside) when it is empty or
// contains a double quote, backslash, parenthesis, comma or ASCII white space (space, \t, \n, \v, \f, \r).
// The encoding is unambiguous, and PostgreSQL computes it natively.
// Row hash: the first 8 bytes of MD5(UTF-8 of the row encoding) read as a big-endian unsigned 64-bit integer.
// Batch checksum: the sum of the row hashes modulo 2^64, written in decimal. It is order-independent, so
// source and target may read rows in any order; the row count is recorded beside it.
// MD5 is used as a content fingerprint against accidents (lost/duplicated/changed rows), not as a security hash.
//
// "keel-pg1" (PostgreSQL -> PostgreSQL only, where both sides can run it, and much cheaper): the row is the record
// literal of the typed values themselves (numeric through trim_scale), as PostgreSQL prints them under fixed session
// settings (TimeZone UTC, DateStyle ISO/YMD, bytea_output hex, IntervalStyle postgres); the row hash is
// hashtextextended(row text, 0), the stable 64-bit hash behind hash partitioning; summed mod 2^64 like keel-v1.
// Its checksums carry the prefix "pg1:", so every checksum says how it was computed.
//
// "keel-pg2" (PostgreSQL 14+ -> PostgreSQL 14+ only; about twice as cheap as keel-pg1 because nothing is printed as
// text): the row hash is hash_record_extended(row(f1, f2, ...), 0) -- the stable 64-bit hash of a record behind hash
// partitioning (per field the type's extended hash, NULL = 0, combined as h = 31 * h + field hash) -- over fields
// chosen so that each one is hashed by its exact value with full 64-bit strength, independent of the declared type
// on either side (integer vs bigint, numeric(12,2) vs numeric, varchar vs text, timestamp(3) vs timestamp):
//   int          int8send(v::bigint)            the 8 bytes, hashed like bytea
//   decimal      numeric_send(trim_scale(v))    sign, weight, scale and digits of the value without trailing zeros
//   text         v collate "C"                  the bytes (a character(n) value through its printed form, padding kept)
//   bool         v
//   date         date_send(v)
//   timestamp    timestamp_send(v)              microseconds since 2000-01-01 (timestamptz: timestamptz_send, UTC)
//   bytes        v                              the bytes
//   uuid         v                              the 16 bytes
// (The types' own hashes are not used for int, decimal and timestamps: hashint8 folds 64 bits into 32 and the numeric
// hash ignores the sign.) Summed mod 2^64 like keel-v1; prefix "pg2:".
//
// The service picks keel-pg2 when source and target are both PostgreSQL 14 or later, keel-pg1 for older PostgreSQL
// pairs, keel-v1 otherwise. A batch is always verified with the algorithm its manifest names, so manifests recorded
// with keel-pg1 stay verifiable.
//
// PostgreSQL computes the same value in SQL (shared/engines/postgres/transferSql.ts); other engines stream
// canonical strings through `ChecksumAccumulator`. test/transfer/checksum.test.ts proves the two agree.
import { createHash } from 'node:crypto';
import {
  COPY_BYTES_FIELD,
  COPY_PLAIN,
  COPY_TEXT_FIELD,
  md5RowPrefix,
  md5RowPrefixCopy,
  RowHashSum,
  type CopyOut,
} from './md5.js';

export type LogicalType =
  'int' | 'decimal' | 'float' | 'text' | 'bool' | 'date' | 'timestamp' | 'timestamptz' | 'bytes' | 'uuid';
export const LOGICAL_TYPES: readonly LogicalType[] = [
  'int',
  'decimal',
  'float',
  'text',
  'bool',
  'date',
  'timestamp',
  'timestamptz',
  'bytes',
  'uuid',
];
export const CHECKSUM_ALGORITHM = 'keel-v1';
export type ChecksumAlgorithm = 'keel-v1' | 'keel-pg1' | 'keel-pg2';
export const PG1_PREFIX = 'pg1:';
export const PG2_PREFIX = 'pg2:';

export function algorithmOf(checksum: string): ChecksumAlgorithm {
  return checksum.startsWith(PG2_PREFIX) ? 'keel-pg2' : checksum.startsWith(PG1_PREFIX) ? 'keel-pg1' : 'keel-v1';
}

export type CanonicalRow = (string | null)[];

// A chunk of canonical rows may carry the same rows as PostgreSQL COPY text (a PostgreSQL source reads them so):
// a PostgreSQL target then writes those bytes as they came instead of formatting the rows again
// (transferSql.ts, copyChunk). So a chunk's rows are never changed in place: a step that converts rows yields new
// arrays (policies.ts), which carry no COPY text.
export const COPY_TEXT: unique symbol = Symbol('keel.copyText');
export type CanonicalChunk = CanonicalRow[] & { [COPY_TEXT]?: Buffer };

const NEEDS_QUOTES = /["\\(),\t\n\v\f\r ]/;

export function rowEncoding(row: CanonicalRow): string {
  let out = '(';
  for (let i = 0; i < row.length; i++) {
    if (i > 0) out += ',';
    const v = row[i];
    if (v === null || v === undefined) continue;
    if (v === '' || NEEDS_QUOTES.test(v)) out += `"${v.replace(/["\\]/g, (m) => m + m)}"`;
    else out += v;
  }
  return `${out})`;
}

export function rowHash(row: CanonicalRow): bigint {
  return createHash('md5').update(rowEncoding(row), 'utf8').digest().readBigUInt64BE(0);
}

// The keel-v1 row hash, as rowHash defines it, without a BigInt, a Buffer or a string per row (shared/transfer/md5.ts).
const digest = new Uint32Array(2);

// The batch checksum of rows added one at a time (the running sum: md5.ts RowHashSum).
export class ChecksumAccumulator {
  private readonly sum = new RowHashSum();

  get count(): number {
    return this.sum.count;
  }

  add(row: CanonicalRow): void {
    md5RowPrefix(row, digest);
    this.sum.add(digest[0]!, digest[1]!);
  }

  // Announces a chunk whose rows addChunk will add: until then, whoever writes the chunk's rows as PostgreSQL COPY
  // text (copyTextHashing) may hash them in the same pass, and addChunk takes that chunk's sum instead of hashing
  // again. Chunks are never changed in place (COPY_TEXT above), so the sum stays the sum of the chunk's rows.
  expect(chunk: CanonicalChunk): void {
    (chunk as Announced)[CHUNK_SUM] = { hashed: null };
  }

  // add() of every row of the chunk (its sum when copyTextHashing computed it).
  addChunk(chunk: CanonicalChunk): void {
    const hashed = (chunk as Announced)[CHUNK_SUM]?.hashed;
    if (hashed && hashed.count === chunk.length) this.sum.addSum(hashed);
    else for (const row of chunk) this.add(row);
    delete (chunk as Announced)[CHUNK_SUM];
  }

  get checksum(): string {
    return this.sum.checksum;
  }
}

// The keel-v1 sum of an announced chunk's rows (ChecksumAccumulator.expect), once computed.
const CHUNK_SUM: unique symbol = Symbol('keel.v1ChunkSum');
let copyBytesPerRow = 64;
// hashed: the sum of the chunk's rows once copyTextHashing has computed it.
type Announced = CanonicalChunk & { [CHUNK_SUM]?: { hashed: RowHashSum | null } };

// The rows as PostgreSQL COPY text (exactly what transferSql.ts copyText writes for them, as UTF-8), hashing them with
// keel-v1 in the same pass when the chunk is announced and not hashed yet; null when it is not announced (the caller
// formats it as before: nothing would read the hashes).
export function copyTextHashing(chunk: CanonicalChunk, types: readonly LogicalType[]): Buffer | null {
  const s = (chunk as Announced)[CHUNK_SUM];
  if (!s || s.hashed) return null;
  const kinds = new Uint8Array(
    types.map((t) => (t === 'text' ? COPY_TEXT_FIELD : t === 'bytes' ? COPY_BYTES_FIELD : COPY_PLAIN)),
  );
  // Sized by the last chunk's bytes a row (grown when short): no zero fill, little left over.
  const o: CopyOut = { bytes: Buffer.allocUnsafe(Math.ceil(chunk.length * copyBytesPerRow * 1.1) + 256), pos: 0 };
  const sum = new RowHashSum();
  for (const row of chunk) {
    // A row of another width hashes as its own fields (rowEncoding): this chunk is left to addChunk's rows.
    if (row.length !== kinds.length) return null;
    md5RowPrefixCopy(row, kinds, digest, o);
    sum.add(digest[0]!, digest[1]!);
  }
  if (chunk.length > 0) copyBytesPerRow = o.pos / chunk.length;
  s.hashed = sum;
  return Buffer.from(o.bytes.buffer, o.bytes.byteOffset, o.pos);
}

const INT_RE = /^([+-]?)0*(\d+)$/;
const DEC_RE = /^([+-]?)(\d*)(?:\.(\d*))?$/;

function canonicalInt(v: unknown): string {
  const s = typeof v === 'bigint' ? v.toString() : typeof v === 'number' ? integerFromNumber(v) : String(v).trim();
  const m = INT_RE.exec(s);
  if (!m) throw new Error(`"${s}" is not an integer`);
  const digits = m[2]!.replace(/^0+(?=\d)/, '');
  return digits === '0' ? '0' : `${m[1] === '-' ? '-' : ''}${digits}`;
}

function integerFromNumber(n: number): string {
  if (!Number.isSafeInteger(n))
    throw new Error(`integer ${n} is outside the exact range of a double; fetch it as a string`);
  return String(n);
}

export function canonicalDecimal(v: unknown): string {
  let s: string;
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error(`decimal ${v} is not finite`);
    s = Number.isInteger(v) ? integerFromNumber(v) : expandExponent(String(v));
  } else s = expandExponent(String(v).trim());
  const m = DEC_RE.exec(s);
  if (!m || (m[2] === '' && (m[3] ?? '') === '')) throw new Error(`"${s}" is not a decimal`);
  const intPart = (m[2] || '0').replace(/^0+(?=\d)/, '');
  const frac = (m[3] ?? '').replace(/0+$/, '');
  const body = frac ? `${intPart}.${frac}` : intPart;
  const zero = /^0(\.0*)?$/.test(body);
  return zero ? '0' : `${m[1] === '-' ? '-' : ''}${body}`;
}

// A double's canonical text (see "float" above). Strings are a driver's or server's shortest text, e.g. "1e-07".
export function canonicalFloat(v: unknown): string {
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error(`float ${v} is not finite`);
    return canonicalDecimal(String(v));
  }
  const s = String(v).trim();
  if (/^[+-]?(nan|inf(inity)?)$/i.test(s)) throw new Error(`float ${s} is not finite`);
  const n = Number(s);
  if (!Number.isFinite(n)) throw new Error(`"${s}" is not a float`);
  // Shortest digits of the double the text denotes, so "0.10000000000000001" and "0.1" agree.
  return canonicalDecimal(String(n));
}

function expandExponent(s: string): string {
  const m = /^([+-]?)(\d*)(?:\.(\d*))?[eE]([+-]?\d+)$/.exec(s);
  if (!m) return s;
  const sign = m[1] === '-' ? '-' : '';
  const digits = (m[2] ?? '') + (m[3] ?? '');
  const point = (m[2] ?? '').length + Number(m[4]);
  if (point <= 0) return `${sign}0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return `${sign}${digits}${'0'.repeat(point - digits.length)}`;
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
}

const pad = (n: number, w: number) => String(n).padStart(w, '0');

function dateParts(d: Date, utc: boolean) {
  return utc
    ? {
        y: d.getUTCFullYear(),
        mo: d.getUTCMonth() + 1,
        da: d.getUTCDate(),
        h: d.getUTCHours(),
        mi: d.getUTCMinutes(),
        s: d.getUTCSeconds(),
        ms: d.getUTCMilliseconds(),
      }
    : {
        y: d.getFullYear(),
        mo: d.getMonth() + 1,
        da: d.getDate(),
        h: d.getHours(),
        mi: d.getMinutes(),
        s: d.getSeconds(),
        ms: d.getMilliseconds(),
      };
}

// Strings are accepted as "YYYY-MM-DD[ T]HH:MM:SS[.fraction][Z|+hh[:mm]]"; the fraction is cut or padded to 6 digits.
const TS_RE = /^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?)?\s*(Z|[+-]\d{2}(?::?\d{2})?)?$/;

function canonicalTimestamp(v: unknown, withZone: boolean): string {
  if (v instanceof Date) {
    // Drivers hand back Date (millisecond precision). timestamp without zone: the driver's wall clock.
    const p = dateParts(v, true);
    return `${pad(p.y, 4)}-${pad(p.mo, 2)}-${pad(p.da, 2)}T${pad(p.h, 2)}:${pad(p.mi, 2)}:${pad(p.s, 2)}.${pad(p.ms, 3)}000${withZone ? 'Z' : ''}`;
  }
  const s = String(v).trim();
  const m = TS_RE.exec(s);
  if (!m) throw new Error(`"${s}" is not a timestamp`);
  const frac = (m[7] ?? '').padEnd(6, '0').slice(0, 6);
  let y = Number(m[1]),
    mo = Number(m[2]),
    da = Number(m[3]),
    h = Number(m[4] ?? 0),
    mi = Number(m[5] ?? 0);
  const sec = Number(m[6] ?? 0);
  const zone = m[8];
  if (withZone && zone && zone !== 'Z') {
    const zm = /^([+-])(\d{2}):?(\d{2})?$/.exec(zone)!;
    const offset = (zm[1] === '-' ? -1 : 1) * (Number(zm[2]) * 60 + Number(zm[3] ?? 0));
    // setUTCFullYear, not Date.UTC's year argument: Date.UTC reads years 0..99 as 1900..1999.
    const local = new Date(Date.UTC(2000, 0, 1, h, mi, sec));
    local.setUTCFullYear(y, mo - 1, da);
    const d = new Date(local.getTime() - offset * 60_000);
    const p = dateParts(d, true);
    y = p.y;
    mo = p.mo;
    da = p.da;
    h = p.h;
    mi = p.mi;
    return `${pad(y, 4)}-${pad(mo, 2)}-${pad(da, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(p.s, 2)}.${frac}Z`;
  }
  return `${pad(y, 4)}-${pad(mo, 2)}-${pad(da, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(sec, 2)}.${frac}${withZone ? 'Z' : ''}`;
}

function canonicalDate(v: unknown): string {
  if (v instanceof Date) {
    const p = dateParts(v, true);
    return `${pad(p.y, 4)}-${pad(p.mo, 2)}-${pad(p.da, 2)}`;
  }
  const s = String(v).trim();
  const m = /^(\d{4})-(\d{2})-(\d{2})/.exec(s);
  if (!m) throw new Error(`"${s}" is not a date`);
  return `${m[1]}-${m[2]}-${m[3]}`;
}

function canonicalBool(v: unknown): string {
  if (v === true || v === 1 || v === '1' || v === 't' || v === 'true' || v === 'T' || v === 'TRUE') return 't';
  if (v === false || v === 0 || v === '0' || v === 'f' || v === 'false' || v === 'F' || v === 'FALSE') return 'f';
  throw new Error(`"${String(v)}" is not a boolean`);
}

function canonicalBytes(v: unknown): string {
  if (Buffer.isBuffer(v)) return v.toString('hex');
  if (v instanceof Uint8Array) return Buffer.from(v).toString('hex');
  const s = String(v)
    .trim()
    .toLowerCase()
    .replace(/^\\x|^0x/, '');
  if (!/^([0-9a-f]{2})*$/.test(s)) throw new Error(`"${s}" is not hex bytes`);
  return s;
}

function canonicalUuid(v: unknown): string {
  const s = String(v).trim().toLowerCase();
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(s))
    throw new Error(`"${s}" is not a uuid`);
  return s;
}

// Converts a driver value to the canonical text of its logical type (null stays null).
export function canonicalValue(type: LogicalType, v: unknown): string | null {
  if (v === null || v === undefined) return null;
  switch (type) {
    case 'int':
      return canonicalInt(v);
    case 'decimal':
      return canonicalDecimal(v);
    case 'float':
      return canonicalFloat(v);
    case 'text':
      return typeof v === 'string' ? v : String(v);
    case 'bool':
      return canonicalBool(v);
    case 'date':
      return canonicalDate(v);
    case 'timestamp':
      return canonicalTimestamp(v, false);
    case 'timestamptz':
      return canonicalTimestamp(v, true);
    case 'bytes':
      return canonicalBytes(v);
    case 'uuid':
      return canonicalUuid(v);
  }
}
