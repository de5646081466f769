// MD5 (RFC 1321) of a string's UTF-8 bytes, for the keel-v1 row hash (shared/transfer/checksum.ts), which needs the
// first 8 digest bytes only. In JavaScript because the row hash is per row: node:crypto's one-shot hash costs about
// twice as much per short input (the call, a hash context and a Buffer each time) as this loop over a reused buffer.
// test/transfer/checksum.test.ts compares it with node:crypto and with PostgreSQL's md5().
const K = new Int32Array(64);
for (let i = 0; i < 64; i++) K[i] = Math.floor(Math.abs(Math.sin(i + 1)) * 4294967296) | 0;
const S = new Int32Array([
  7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 4,
  11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
]);
const W = new Int32Array(16);
const encoder = new TextEncoder();
let buf = new Uint8Array(4096);

const bswap = (x: number) =>
  (((x & 0xff) << 24) | (((x >>> 8) & 0xff) << 16) | (((x >>> 16) & 0xff) << 8) | (x >>> 24)) >>> 0;

// The first 8 bytes of MD5(UTF-8 of s) as two big-endian unsigned 32-bit numbers, written to out[0] and out[1].
export function md5Prefix(s: string, out: Uint32Array): void {
  const need = s.length * 3 + 72; // at most 3 UTF-8 bytes per UTF-16 unit, then the padding
  if (buf.length < need) buf = new Uint8Array(need * 2);
  md5Buffered(encoder.encodeInto(s, buf).written, out);
}

// Room for `more` bytes after `used` (plus the padding), keeping what is written.
function reserve(used: number, more: number): void {
  if (buf.length >= used + more + 72) return;
  const grown = new Uint8Array((used + more + 72) * 2);
  grown.set(buf.subarray(0, used));
  buf = grown;
}

// Writes the UTF-8 bytes of s at pos (as TextEncoder does: a lone surrogate as U+FFFD), the characters `"` and `\`
// twice when `doubled`; answers the position after them, or -1 when not doubled and s holds a character that makes
// the record literal quote the value (checksum.ts, rowEncoding).
function putField(s: string, pos: number, doubled: boolean): number {
  const b = buf;
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      if (c === 0x22 || c === 0x5c) {
        if (!doubled) return -1;
        b[pos++] = c;
      } else if (!doubled && (c === 0x20 || c === 0x28 || c === 0x29 || c === 0x2c || (c >= 0x09 && c <= 0x0d)))
        return -1;
      b[pos++] = c;
    } else if (c < 0x800) {
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

// md5Prefix of checksum.ts's rowEncoding(row), with the record literal written as UTF-8 straight into the reused
// buffer (no string built per row, no regular expression per field): the row hash of keel-v1 in one pass.
export function md5RowPrefix(row: readonly (string | null | undefined)[], out: Uint32Array): void {
  reserve(0, 2);
  let pos = 0;
  buf[pos++] = 0x28; // (
  for (let i = 0; i < row.length; i++) {
    const v = row[i];
    // this , then the value: each unit at most 3 bytes (or a doubled 1), its quotes; then the ) at the end
    reserve(pos, v == null ? 2 : v.length * 6 + 4);
    if (i > 0) buf[pos++] = 0x2c; // ,
    if (v === null || v === undefined) continue;
    const end = v.length === 0 ? -1 : putField(v, pos, false);
    if (end >= 0) pos = end;
    else {
      buf[pos] = 0x22;
      pos = putField(v, pos + 1, true);
      buf[pos++] = 0x22;
    }
  }
  buf[pos++] = 0x29; // )
  md5Buffered(pos, out);
}

// md5Prefix of the first n bytes of buf (which has room for the padding after them).
function md5Buffered(n: number, out: Uint32Array): void {
  const total = (((n + 8) >>> 6) + 1) << 6;
  buf[n] = 0x80;
  buf.fill(0, n + 1, total - 8);
  // the message length in bits, 64-bit little-endian
  const lowBits = (n * 8) >>> 0;
  const highBits = Math.floor(n / 536870912);
  buf[total - 8] = lowBits & 0xff;
  buf[total - 7] = (lowBits >>> 8) & 0xff;
  buf[total - 6] = (lowBits >>> 16) & 0xff;
  buf[total - 5] = lowBits >>> 24;
  buf[total - 4] = highBits & 0xff;
  buf[total - 3] = (highBits >>> 8) & 0xff;
  buf[total - 2] = (highBits >>> 16) & 0xff;
  buf[total - 1] = highBits >>> 24;
  let a0 = 0x67452301;
  let b0 = 0xefcdab89 | 0;
  let c0 = 0x98badcfe | 0;
  let d0 = 0x10325476;
  for (let off = 0; off < total; off += 64) {
    for (let j = 0; j < 16; j++) {
      const p = off + j * 4;
      W[j] = buf[p]! | (buf[p + 1]! << 8) | (buf[p + 2]! << 16) | (buf[p + 3]! << 24);
    }
    let a = a0;
    let b = b0;
    let c = c0;
    let d = d0;
    let t = 0;
    let r = 0;
    for (let i = 0; i < 16; i++) {
      t = (a + ((b & c) | (~b & d)) + K[i]! + W[i]!) | 0;
      a = d;
      d = c;
      c = b;
      r = S[i]!;
      b = (b + ((t << r) | (t >>> (32 - r)))) | 0;
    }
    for (let i = 16; i < 32; i++) {
      t = (a + ((d & b) | (~d & c)) + K[i]! + W[(5 * i + 1) & 15]!) | 0;
      a = d;
      d = c;
      c = b;
      r = S[i]!;
      b = (b + ((t << r) | (t >>> (32 - r)))) | 0;
    }
    for (let i = 32; i < 48; i++) {
      t = (a + (b ^ c ^ d) + K[i]! + W[(3 * i + 5) & 15]!) | 0;
      a = d;
      d = c;
      c = b;
      r = S[i]!;
      b = (b + ((t << r) | (t >>> (32 - r)))) | 0;
    }
    for (let i = 48; i < 64; i++) {
      t = (a + (c ^ (b | ~d)) + K[i]! + W[(7 * i) & 15]!) | 0;
      a = d;
      d = c;
      c = b;
      r = S[i]!;
      b = (b + ((t << r) | (t >>> (32 - r)))) | 0;
    }
    a0 = (a0 + a) | 0;
    b0 = (b0 + b) | 0;
    c0 = (c0 + c) | 0;
    d0 = (d0 + d) | 0;
  }
  // The digest's bytes are a0 then b0, each little-endian: read big-endian, each is byte-swapped.
  out[0] = bswap(a0);
  out[1] = bswap(b0);
}
