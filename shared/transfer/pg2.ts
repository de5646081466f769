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
// buf's bytes as little-endian 32-bit words (lookup3's reads on the little-endian machines Node runs on; checked
// below), made again when buf is replaced.
let words = new Int32Array(buf.buffer);
if (new Uint8Array(new Uint32Array([1]).buffer)[0] !== 1) throw new Error('pg2.ts reads words little-endian');
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
  const wk = words;
  while (n >= 12) {
    const q = p >>> 2; // p is a multiple of 12
    a = (a + wk[q]!) | 0;
    b = (b + wk[q + 1]!) | 0;
    c = (c + wk[q + 2]!) | 0;
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
  if (buf.length < n) {
    buf = new Uint8Array(n * 2 + 4);
    words = new Int32Array(buf.buffer, 0, buf.length >>> 2);
  }
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

// The digit at s[i], or fails (no regular expressions and no substrings: this runs for every value written).
function digitOf(s: string, i: number, what: string): number {
  const d = s.charCodeAt(i) - 48;
  if (d >= 0 && d <= 9) return d;
  return fail(what, s);
}

function intField(s: string): number {
  const neg = s.charCodeAt(0) === 45; // -
  const from = neg ? 1 : 0;
  const len = s.length - from;
  if (len < 1 || len > 19) fail('integer', s);
  if (len <= 15) {
    let n = 0;
    for (let i = from; i < s.length; i++) n = n * 10 + digitOf(s, i, 'integer');
    if (neg) n = -n;
    const hi = Math.floor(n / TWO32);
    put64(0, hi, n - hi * TWO32);
  } else {
    for (let i = from; i < s.length; i++) digitOf(s, i, 'integer');
    const n = BigInt.asUintN(64, BigInt(s));
    put32(0, Number(n >> 32n));
    put32(4, Number(n & 0xffffffffn));
  }
  return 8;
}

let groups = new Int32Array(64);

// numeric_send(trim_scale(v)): int16 ndigits, int16 weight, uint16 sign, int16 dscale, then the base-10000 digits
// with no leading or trailing zero digit (weight: the power of 10000 of the first); zero is 0, 0, 0, 0.
function decimalField(s: string): number {
  const neg = s.charCodeAt(0) === 45;
  const from = neg ? 1 : 0;
  let point = s.indexOf('.', from);
  if (point < 0) point = s.length;
  if (point === from || point === s.length - 1) fail('decimal', s);
  for (let i = from; i < s.length; i++) if (i !== point) digitOf(s, i, 'decimal');
  let intStart = from;
  while (intStart < point && s.charCodeAt(intStart) === 48) intStart++;
  let fracEnd = s.length;
  if (point < s.length) while (fracEnd > point + 1 && s.charCodeAt(fracEnd - 1) === 48) fracEnd--;
  const intLen = point - intStart;
  const fracLen = point < s.length ? fracEnd - point - 1 : 0;
  // The digits from the first full group of 4 left of the point to the last right of it, as groups.
  const lead = (4 - (intLen % 4)) % 4;
  const total = lead + intLen + fracLen + ((4 - (fracLen % 4)) % 4);
  const count = total / 4;
  if (groups.length < count) groups = new Int32Array(count * 2);
  for (let g = 0; g < count; g++) {
    let v = 0;
    for (let k = g * 4; k < g * 4 + 4; k++) {
      const j = k - lead; // index among the int digits, then the fraction digits
      v = v * 10 + (j < 0 ? 0 : j < intLen ? s.charCodeAt(intStart + j) - 48 : j < intLen + fracLen ? s.charCodeAt(point + 1 + j - intLen) - 48 : 0);
    }
    groups[g] = v;
  }
  let first = 0;
  let last = count;
  let weight = (lead + intLen) / 4 - 1;
  while (first < last && groups[first] === 0) {
    first++;
    weight--;
  }
  while (last > first && groups[last - 1] === 0) last--;
  const n = last - first;
  room(8 + 2 * n);
  const zero = n === 0;
  const b = buf;
  b[0] = n >>> 8;
  b[1] = n & 0xff;
  const w = zero ? 0 : weight & 0xffff;
  b[2] = w >>> 8;
  b[3] = w & 0xff;
  b[4] = !zero && neg ? 0x40 : 0;
  b[5] = 0;
  const scale = zero ? 0 : fracLen;
  b[6] = scale >>> 8;
  b[7] = scale & 0xff;
  for (let g = 0; g < n; g++) {
    const v = groups[first + g]!;
    b[8 + 2 * g] = v >>> 8;
    b[9 + 2 * g] = v & 0xff;
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

// Days from 2000-01-01 of s's leading YYYY-MM-DD.
function dateDays(s: string, what: string): number {
  if (s.charCodeAt(4) !== 45 || s.charCodeAt(7) !== 45) fail(what, s);
  const y = digitOf(s, 0, what) * 1000 + digitOf(s, 1, what) * 100 + digitOf(s, 2, what) * 10 + digitOf(s, 3, what);
  const m = digitOf(s, 5, what) * 10 + digitOf(s, 6, what);
  const d = digitOf(s, 8, what) * 10 + digitOf(s, 9, what);
  if (m < 1 || m > 12 || d < 1 || d > 31) fail(what, s);
  return civilDays(y, m, d) - EPOCH_2000;
}

function dateField(s: string): number {
  if (s.length !== 10) fail('date', s);
  put32(0, dateDays(s, 'date') >>> 0);
  return 4;
}

// Microseconds since 2000-01-01 00:00 as 8 bytes: seconds * 10^6 + fraction, kept exact in doubles by splitting the
// seconds at 2^16 (each product then stays below 2^53). YYYY-MM-DDTHH:MM:SS.ffffff, then Z for timestamptz.
function timestampField(s: string, zone: boolean): number {
  const what = zone ? 'timestamptz' : 'timestamp';
  if (
    s.length !== (zone ? 27 : 26) ||
    s.charCodeAt(10) !== 84 || // T
    s.charCodeAt(13) !== 58 ||
    s.charCodeAt(16) !== 58 ||
    s.charCodeAt(19) !== 46 ||
    (zone && s.charCodeAt(26) !== 90) // Z
  )
    fail(what, s);
  const secs =
    dateDays(s, what) * 86400 +
    (digitOf(s, 11, what) * 10 + digitOf(s, 12, what)) * 3600 +
    (digitOf(s, 14, what) * 10 + digitOf(s, 15, what)) * 60 +
    digitOf(s, 17, what) * 10 +
    digitOf(s, 18, what);
  let frac = 0;
  for (let i = 20; i < 26; i++) frac = frac * 10 + digitOf(s, i, what);
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
      // h = 31 * h mod 2^64 (lo * 31 < 2^37: exact), then + the field hash
      const lo31 = lo * 31;
      lo = Math.imul(lo, 31) >>> 0;
      hi = (Math.imul(hi, 31) + (lo31 - lo) / TWO32) >>> 0;
      const v = row[i];
      if (v === null || v === undefined) continue;
      fieldHash(types[i]!, v);
      lo += out[1]!;
      hi += out[0]!;
      if (lo >= TWO32) {
        lo -= TWO32;
        hi += 1;
      }
      hi >>>= 0;
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
