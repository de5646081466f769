// keel-pg2 (shared/transfer/checksum.ts) of canonical rows, computed in Node: the value PostgreSQL's
// hash_record_extended(row(<pg2Field of each column>), 0) gives for the same values once they are stored in a table
// (shared/engines/postgres/transferSql.ts, pg2Field), summed mod 2^64. For the direct apply of the row path
// (docs/transfer.md): Node hashes the rows it writes into the target's COPY, and the target's server checks the
// stored rows with keel-pg2 (~1.4 s of server CPU per 1M rows of the bench's shape) instead of keel-v1 (~6 s: every
// value printed as canonical text, a record literal and an MD5 per row). The journal's manifest stays keel-v1.
// test/transfer/checksum.test.ts compares this with PostgreSQL over odd values of every logical type.
//
// Per field (NULL hashes as 0): the bytes PostgreSQL's *_send gives for the stored value, hashed like bytea
// (hash_bytes_extended, seed 0) -- int: int8send; decimal and float: numeric_send(trim_scale(v)); date: date_send;
// timestamp and timestamptz: *_send (microseconds since 2000-01-01, UTC); text: the UTF-8 bytes (collate "C");
// bytes and uuid: the bytes; bool: hash_uint32_extended(0 or 1). The row: h = 31 * h + field hash, mod 2^64.
import type { CanonicalRow, LogicalType } from './checksum.js';
import { PG2_PREFIX } from './checksum.js';

const TWO32 = 4294967296;
let buf = new Uint8Array(256);
const out = new Uint32Array(2); // hi, lo of the last hash

const rot = (x: number, k: number) => (x << k) | (x >>> (32 - k));

// hash_bytes_extended(buf[0..len), seed 0): Bob Jenkins' lookup3 as PostgreSQL's src/common/hashfn.c runs it on a
// little-endian machine (the words read little-endian whatever the alignment); the result is b << 32 | c.
function hashBytes(len: number): void {
  const k = buf;
  let a = (0x9e3779b9 + len + 3923095) | 0;
  let b = a;
  let c = a;
  let p = 0;
  let n = len;
  while (n >= 12) {
    a = (a + (k[p]! | (k[p + 1]! << 8) | (k[p + 2]! << 16) | (k[p + 3]! << 24))) | 0;
    b = (b + (k[p + 4]! | (k[p + 5]! << 8) | (k[p + 6]! << 16) | (k[p + 7]! << 24))) | 0;
    c = (c + (k[p + 8]! | (k[p + 9]! << 8) | (k[p + 10]! << 16) | (k[p + 11]! << 24))) | 0;
    // mix(a, b, c)
    a = (a - c) | 0;
    a ^= rot(c, 4);
    c = (c + b) | 0;
    b = (b - a) | 0;
    b ^= rot(a, 6);
    a = (a + c) | 0;
    c = (c - b) | 0;
    c ^= rot(b, 8);
    b = (b + a) | 0;
    a = (a - c) | 0;
    a ^= rot(c, 16);
    c = (c + b) | 0;
    b = (b - a) | 0;
    b ^= rot(a, 19);
    a = (a + c) | 0;
    c = (c - b) | 0;
    c ^= rot(b, 4);
    b = (b + a) | 0;
    p += 12;
    n -= 12;
  }
  // the last 11 bytes (the lowest byte of c is reserved for the length)
  switch (n) {
    case 11:
      c = (c + (k[p + 10]! << 24)) | 0;
    // falls through
    case 10:
      c = (c + (k[p + 9]! << 16)) | 0;
    // falls through
    case 9:
      c = (c + (k[p + 8]! << 8)) | 0;
    // falls through
    case 8:
      b = (b + (k[p + 7]! << 24)) | 0;
    // falls through
    case 7:
      b = (b + (k[p + 6]! << 16)) | 0;
    // falls through
    case 6:
      b = (b + (k[p + 5]! << 8)) | 0;
    // falls through
    case 5:
      b = (b + k[p + 4]!) | 0;
    // falls through
    case 4:
      a = (a + (k[p + 3]! << 24)) | 0;
    // falls through
    case 3:
      a = (a + (k[p + 2]! << 16)) | 0;
    // falls through
    case 2:
      a = (a + (k[p + 1]! << 8)) | 0;
    // falls through
    case 1:
      a = (a + k[p]!) | 0;
  }
  finalMix(a, b, c);
}

function finalMix(a: number, b: number, c: number): void {
  c ^= b;
  c = (c - rot(b, 14)) | 0;
  a ^= c;
  a = (a - rot(c, 11)) | 0;
  b ^= a;
  b = (b - rot(a, 25)) | 0;
  c ^= b;
  c = (c - rot(b, 16)) | 0;
  a ^= c;
  a = (a - rot(c, 4)) | 0;
  b ^= a;
  b = (b - rot(a, 14)) | 0;
  c ^= b;
  c = (c - rot(b, 24)) | 0;
  out[0] = b;
  out[1] = c;
}

// hash_uint32_extended(k, seed 0).
function hashUint32(k: number): void {
  const a = (0x9e3779b9 + 4 + 3923095) | 0;
  finalMix((a + k) | 0, a, a);
}

function room(n: number): void {
  if (buf.length < n) buf = new Uint8Array(n * 2);
}

// UTF-8 of s into buf (as TextEncoder and Buffer.from write it: a lone surrogate as U+FFFD); answers the length.
function utf8(s: string): number {
  room(s.length * 3);
  const b = buf;
  let pos = 0;
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) b[pos++] = c;
    else if (c < 0x800) {
      b[pos++] = 0xc0 | (c >>> 6);
      b[pos++] = 0x80 | (c & 0x3f);
    } else {
      if (c >= 0xd800 && c <= 0xdfff) {
        const next = i + 1 < s.length ? s.charCodeAt(i + 1) : 0;
        if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
          c = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
          i++;
          b[pos++] = 0xf0 | (c >>> 18);
          b[pos++] = 0x80 | ((c >>> 12) & 0x3f);
          b[pos++] = 0x80 | ((c >>> 6) & 0x3f);
          b[pos++] = 0x80 | (c & 0x3f);
          continue;
        }
        c = 0xfffd;
      }
      b[pos++] = 0xe0 | (c >>> 12);
      b[pos++] = 0x80 | ((c >>> 6) & 0x3f);
      b[pos++] = 0x80 | (c & 0x3f);
    }
  }
  return pos;
}

function put32(pos: number, v: number): void {
  buf[pos] = v >>> 24;
  buf[pos + 1] = (v >>> 16) & 0xff;
  buf[pos + 2] = (v >>> 8) & 0xff;
  buf[pos + 3] = v & 0xff;
}

// The 64-bit two's complement of hi * 2^32 + lo (any doubles whose value is an exact integer) at pos, big-endian.
function put64(pos: number, hi: number, lo: number): void {
  const carry = Math.floor(lo / TWO32);
  put32(pos, (hi + carry) >>> 0);
  put32(pos + 4, (lo - carry * TWO32) >>> 0);
}

function fail(what: string, v: string): never {
  throw new Error(`"${v}" is not a canonical ${what}`);
}

const digit = (s: string, i: number) => s.charCodeAt(i) - 48;

function intField(s: string): number {
  if (!/^-?\d{1,19}$/.test(s)) fail('integer', s);
  if (s.length <= 15) {
    const n = Number(s);
    const hi = Math.floor(n / TWO32);
    put64(0, hi, n - hi * TWO32);
  } else {
    const n = BigInt.asUintN(64, BigInt(s));
    put32(0, Number(n >> 32n));
    put32(4, Number(n & 0xffffffffn));
  }
  return 8;
}

// numeric_send(trim_scale(v)): int16 ndigits, int16 weight, uint16 sign, int16 dscale, then the base-10000 digits
// with no leading or trailing zero digit (weight: the power of 10000 of the first); zero is 0, 0, 0, 0.
function decimalField(s: string): number {
  const m = /^(-?)(\d+)(?:\.(\d+))?$/.exec(s);
  if (!m) fail('decimal', s);
  const int = m[2]!.replace(/^0+/, '');
  const frac = (m[3] ?? '').replace(/0+$/, '');
  // The digits from the first full group of 4 left of the point to the last right of it.
  const lead = (4 - (int.length % 4)) % 4;
  const digits = '0'.repeat(lead) + int + frac + '0'.repeat((4 - (frac.length % 4)) % 4);
  let first = 0;
  let groups = digits.length / 4;
  let weight = (lead + int.length) / 4 - 1;
  while (first < groups && digits.startsWith('0000', first * 4)) {
    first++;
    weight--;
  }
  while (groups > first && digits.startsWith('0000', (groups - 1) * 4)) groups--;
  const n = groups - first;
  room(8 + 2 * n);
  const zero = n === 0;
  const put16 = (pos: number, v: number) => {
    buf[pos] = (v >>> 8) & 0xff;
    buf[pos + 1] = v & 0xff;
  };
  put16(0, n);
  put16(2, zero ? 0 : weight);
  put16(4, !zero && m[1] === '-' ? 0x4000 : 0);
  put16(6, zero ? 0 : frac.length);
  for (let g = 0; g < n; g++) {
    const i = (first + g) * 4;
    put16(8 + 2 * g, digit(digits, i) * 1000 + digit(digits, i + 1) * 100 + digit(digits, i + 2) * 10 + digit(digits, i + 3));
  }
  return 8 + 2 * n;
}

// Days from 1970-01-01 of a proleptic Gregorian date (PostgreSQL's calendar).
function civilDays(y: number, m: number, d: number): number {
  y -= m <= 2 ? 1 : 0;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  return era * 146097 + yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy - 719468;
}
const EPOCH_2000 = 10957; // days from 1970-01-01 to 2000-01-01

const DATE_RE = /^\d{4}-\d{2}-\d{2}$/;
function dateDays(s: string): number {
  return (
    civilDays(
      digit(s, 0) * 1000 + digit(s, 1) * 100 + digit(s, 2) * 10 + digit(s, 3),
      digit(s, 5) * 10 + digit(s, 6),
      digit(s, 8) * 10 + digit(s, 9),
    ) - EPOCH_2000
  );
}

function dateField(s: string): number {
  if (!DATE_RE.test(s)) fail('date', s);
  put32(0, dateDays(s) >>> 0);
  return 4;
}

const TS_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z?$/;
// Microseconds since 2000-01-01 00:00 as 8 bytes: seconds * 10^6 + fraction, kept exact in doubles by splitting the
// seconds at 2^16 (each product then stays below 2^53).
function timestampField(s: string, zone: boolean): number {
  if (!TS_RE.test(s) || (s.length === 27) !== zone) fail(zone ? 'timestamptz' : 'timestamp', s);
  const secs =
    dateDays(s) * 86400 +
    (digit(s, 11) * 10 + digit(s, 12)) * 3600 +
    (digit(s, 14) * 10 + digit(s, 15)) * 60 +
    digit(s, 17) * 10 +
    digit(s, 18);
  let frac = 0;
  for (let i = 20; i < 26; i++) frac = frac * 10 + digit(s, i);
  const q = Math.floor(secs / 65536);
  const x = q * 1e6; // < 2^42
  const hi = Math.floor(x / 65536);
  put64(0, hi, (x - hi * 65536) * 65536 + (secs - q * 65536) * 1e6 + frac);
  return 8;
}

function hexField(s: string, what: string): number {
  const hex = what === 'uuid' ? s.replace(/-/g, '') : s;
  if (!(what === 'uuid' ? /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/ : /^([0-9a-f]{2})*$/).test(s))
    fail(what, s);
  room(hex.length / 2);
  for (let i = 0; i < hex.length; i += 2) buf[i / 2] = parseInt(hex.slice(i, i + 2), 16);
  return hex.length / 2;
}

// The field hash of one non-NULL canonical value into out.
function fieldHash(type: LogicalType, v: string): void {
  switch (type) {
    case 'text':
      return hashBytes(utf8(v));
    case 'int':
      return hashBytes(intField(v));
    case 'decimal':
    case 'float':
      return hashBytes(decimalField(v));
    case 'bool':
      if (v !== 't' && v !== 'f') fail('bool', v);
      return hashUint32(v === 't' ? 1 : 0);
    case 'date':
      return hashBytes(dateField(v));
    case 'timestamp':
      return hashBytes(timestampField(v, false));
    case 'timestamptz':
      return hashBytes(timestampField(v, true));
    case 'bytes':
    case 'uuid':
      return hashBytes(hexField(v, type));
  }
}

// The keel-pg2 checksum of canonical rows of the given logical types (mapping order), added a row at a time.
export class Pg2Accumulator {
  private hi = 0;
  private lo = 0;
  count = 0;

  constructor(private readonly types: readonly LogicalType[]) {}

  add(row: CanonicalRow): void {
    let hi = 0;
    let lo = 0;
    const types = this.types;
    for (let i = 0; i < types.length; i++) {
      // h = 31 * h (each product < 2^37: exact), then + the field hash
      lo *= 31;
      hi = hi * 31 + Math.floor(lo / TWO32);
      lo %= TWO32;
      const v = row[i];
      if (v === null || v === undefined) {
        hi %= TWO32;
        continue;
      }
      fieldHash(types[i]!, v);
      lo += out[1]!;
      hi += out[0]!;
      if (lo >= TWO32) {
        lo -= TWO32;
        hi += 1;
      }
      hi %= TWO32;
    }
    lo += this.lo;
    hi += this.hi;
    if (lo >= TWO32) {
      lo -= TWO32;
      hi += 1;
    }
    this.lo = lo;
    this.hi = hi % TWO32;
    this.count++;
  }

  get checksum(): string {
    return PG2_PREFIX + ((BigInt(this.hi) << 32n) + BigInt(this.lo)).toString(10);
  }
}
