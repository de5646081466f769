// MD5 (RFC 1321) of a string's UTF-8 bytes, for the keel-v1 row hash (shared/transfer/checksum.ts), which needs the
// first 8 digest bytes only. In JavaScript because the row hash is per row: node:crypto's one-shot hash costs about
// twice as much per short input (the call, a hash context and a Buffer each time) as this loop over a reused buffer.
// test/transfer/checksum.test.ts compares it with node:crypto and with PostgreSQL's md5().
const W = new Int32Array(16);
const encoder = new TextEncoder();
let buf: Uint8Array = new Uint8Array(4096);
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
// The Int32Array over buf's bytes (made again when buf is replaced).
let words: Int32Array = new Int32Array(buf.buffer, 0, buf.length >>> 2);
const wordsOf = (b: Uint8Array): Int32Array =>
  words.buffer === b.buffer ? words : (words = new Int32Array(b.buffer, b.byteOffset, b.length >>> 2));

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

// Per ASCII character: 1 when it makes the record literal quote the value, 2 when it is also doubled inside the quotes.
const QUOTING = new Uint8Array(128);
for (const c of [0x20, 0x28, 0x29, 0x2c, 0x09, 0x0a, 0x0b, 0x0c, 0x0d]) QUOTING[c] = 1;
QUOTING[0x22] = QUOTING[0x5c] = 2;

// Writes the UTF-8 bytes of s at pos (as TextEncoder does: a lone surrogate as U+FFFD), the characters `"` and `\`
// twice when `doubled`; answers the position after them, or -1 when not doubled and s holds a character that makes
// the record literal quote the value (checksum.ts, rowEncoding).
function putField(s: string, pos: number, doubled: boolean): number {
  const b = buf;
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      const q = QUOTING[c]!;
      if (q !== 0) {
        if (!doubled) return -1;
        if (q === 2) b[pos++] = c;
      }
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

// ---- md5RowPrefix and the row's PostgreSQL COPY text line in one pass ----
// The row path's PostgreSQL target writes canonical rows as COPY text (transferSql.ts copyText) and the service hashes
// the same rows with keel-v1: two passes over every character of every value, one of them building a JavaScript string
// that is encoded to UTF-8 again on the socket. Here each character is read once and written twice, as UTF-8 bytes:
// into the record literal (MD5's buffer) and into the COPY line, so the COPY text is bytes already.

// How a field is written into the COPY text, by its logical type (as copyText's copyField): as it is (the canonical
// text of every type but text and bytes holds nothing COPY escapes), text (\\, tab, newline, carriage return
// escaped), bytes (escaped as text, behind a `\\x` prefix: COPY reads `\x`, bytea's hex input).
export const COPY_PLAIN = 0;
export const COPY_TEXT_FIELD = 1;
export const COPY_BYTES_FIELD = 2;

// Per ASCII character, by how the COPY text writes it (esc: as it is, or escaped): 0 when both the record literal and
// the COPY text take it as it is (almost every character, one test), else QUOTE (it quotes the record literal's
// value), DOUBLE (also doubled inside the quotes), ESCAPE (a backslash and the letter in ESCAPE_LETTER), or-ed.
const QUOTE = 1;
const DOUBLE = 2;
const ESCAPE = 4;
const ESCAPE_LETTER = new Uint8Array(128);
ESCAPE_LETTER[0x5c] = 0x5c; // \ -> \\
ESCAPE_LETTER[0x09] = 0x74; // tab -> \t
ESCAPE_LETTER[0x0a] = 0x6e; // newline -> \n
ESCAPE_LETTER[0x0d] = 0x72; // carriage return -> \r
const AS_IS = new Uint8Array(128);
for (let ch = 0; ch < 128; ch++) AS_IS[ch] = QUOTING[ch] === 0 ? 0 : QUOTING[ch] === 1 ? QUOTE : QUOTE | DOUBLE;
const ESCAPED = AS_IS.map((f, ch) => f | (ESCAPE_LETTER[ch] !== 0 ? ESCAPE : 0));

// Where the COPY text is written: bytes[0, pos) hold the lines so far.
export interface CopyOut {
  bytes: Uint8Array;
  pos: number;
}

// putField, also writing the field's COPY text into c at cpos (`flags`: AS_IS or ESCAPED); answers the record position
// after it (or -1 as putField does, nothing kept), the COPY position in copyEnd.
let copyEnd = 0;
function putFieldCopy(
  s: string,
  pos: number,
  doubled: boolean,
  c: Uint8Array,
  cpos: number,
  flags: Uint8Array,
): number {
  const b = buf;
  for (let i = 0; i < s.length; i++) {
    let ch = s.charCodeAt(i);
    if (ch < 0x80) {
      const f = flags[ch]!;
      if (f === 0) {
        b[pos++] = ch;
        c[cpos++] = ch;
        continue;
      }
      if ((f & QUOTE) !== 0) {
        if (!doubled) return -1;
        if ((f & DOUBLE) !== 0) b[pos++] = ch;
      }
      b[pos++] = ch;
      if ((f & ESCAPE) !== 0) {
        c[cpos++] = 0x5c;
        c[cpos++] = ESCAPE_LETTER[ch]!;
      } else c[cpos++] = ch;
    } else if (ch < 0x800) {
      c[cpos++] = b[pos++] = 0xc0 | (ch >>> 6);
      c[cpos++] = b[pos++] = 0x80 | (ch & 0x3f);
    } else {
      if (ch >= 0xd800 && ch <= 0xdfff) {
        const next = i + 1 < s.length ? s.charCodeAt(i + 1) : 0;
        if (ch <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
          ch = 0x10000 + ((ch - 0xd800) << 10) + (next - 0xdc00);
          i++;
          c[cpos++] = b[pos++] = 0xf0 | (ch >>> 18);
          c[cpos++] = b[pos++] = 0x80 | ((ch >>> 12) & 0x3f);
          c[cpos++] = b[pos++] = 0x80 | ((ch >>> 6) & 0x3f);
          c[cpos++] = b[pos++] = 0x80 | (ch & 0x3f);
          continue;
        }
        ch = 0xfffd;
      }
      c[cpos++] = b[pos++] = 0xe0 | (ch >>> 12);
      c[cpos++] = b[pos++] = 0x80 | ((ch >>> 6) & 0x3f);
      c[cpos++] = b[pos++] = 0x80 | (ch & 0x3f);
    }
  }
  copyEnd = cpos;
  return pos;
}

// md5RowPrefix(row, out), and the row's COPY text line appended to o (its fields by `kinds`, tab-separated, NULL as
// \N, then a newline: what copyText writes, as UTF-8). Rows of kinds.length fields only (the caller checks).
export function md5RowPrefixCopy(
  row: readonly (string | null | undefined)[],
  kinds: Uint8Array,
  out: Uint32Array,
  o: CopyOut,
): void {
  const n = kinds.length;
  let units = 0;
  for (let i = 0; i < n; i++) units += row[i]?.length ?? 0;
  // Room for the row at once: a UTF-16 unit is at most 3 bytes in either (a doubled or escaped character 2); per field
  // its separator, quotes or NULL and the bytes prefix; the parentheses, the newline.
  reserve(0, units * 3 + n * 4 + 2);
  if (o.bytes.length < o.pos + units * 3 + n * 4 + 2) {
    const grown = Buffer.allocUnsafe((o.pos + units * 3 + n * 4 + 2) * 2);
    grown.set(o.bytes.subarray(0, o.pos));
    o.bytes = grown;
  }
  const c = o.bytes;
  let cpos = o.pos;
  let pos = 0;
  buf[pos++] = 0x28; // (
  for (let i = 0; i < n; i++) {
    const v = row[i];
    if (i > 0) {
      buf[pos++] = 0x2c; // ,
      c[cpos++] = 0x09; // tab
    }
    if (v === null || v === undefined) {
      c[cpos++] = 0x5c; // \N
      c[cpos++] = 0x4e;
      continue;
    }
    const kind = kinds[i]!;
    if (kind === COPY_BYTES_FIELD) {
      c[cpos++] = 0x5c;
      c[cpos++] = 0x5c;
      c[cpos++] = 0x78;
    }
    const flags = kind === COPY_PLAIN ? AS_IS : ESCAPED;
    const end = v.length === 0 ? -1 : putFieldCopy(v, pos, false, c, cpos, flags);
    if (end >= 0) pos = end;
    else {
      buf[pos] = 0x22;
      pos = putFieldCopy(v, pos + 1, true, c, cpos, flags);
      buf[pos++] = 0x22;
    }
    cpos = copyEnd;
  }
  buf[pos++] = 0x29; // )
  c[cpos++] = 0x0a; // newline
  o.pos = cpos;
  md5Buffered(pos, out);
}

// md5Prefix of the first n bytes of buf (which has room for the padding after them).
function md5Buffered(n: number, out: Uint32Array): void {
  const total = (((n + 8) >>> 6) + 1) << 6;
  buf[n] = 0x80;
  // The zeros up to the length in a loop: fewer than 64 bytes, where fill()'s call costs more than the stores.
  for (let i = n + 1; i < total - 8; i++) buf[i] = 0;
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
  // The message words read through an Int32Array over the buffer (little-endian, as MD5 reads them), and the 64 steps
  // written out with their constants: with the table-driven loop and the per-character comparisons before (QUOTING),
  // keel-v1 of 1M rows of the bench's shape took 2.3-2.5 s of Node CPU, now 1.6 s (bench/README.md, runs 210-219).
  const words = wordsOf(buf);
  for (let off = 0; off < total; off += 64) {
    let src = words;
    let q = off >>> 2;
    if (!LITTLE_ENDIAN) {
      for (let j = 0; j < 16; j++) {
        const p = off + j * 4;
        W[j] = buf[p]! | (buf[p + 1]! << 8) | (buf[p + 2]! << 16) | (buf[p + 3]! << 24);
      }
      src = W;
      q = 0;
    }
    const x0 = src[q]!;
    const x1 = src[q + 1]!;
    const x2 = src[q + 2]!;
    const x3 = src[q + 3]!;
    const x4 = src[q + 4]!;
    const x5 = src[q + 5]!;
    const x6 = src[q + 6]!;
    const x7 = src[q + 7]!;
    const x8 = src[q + 8]!;
    const x9 = src[q + 9]!;
    const x10 = src[q + 10]!;
    const x11 = src[q + 11]!;
    const x12 = src[q + 12]!;
    const x13 = src[q + 13]!;
    const x14 = src[q + 14]!;
    const x15 = src[q + 15]!;
    let a = a0;
    let b = b0;
    let c = c0;
    let d = d0;
    let t = 0;
    t = (a + ((b & c) | (~b & d)) + x0 + -680876936) | 0;
    a = (b + ((t << 7) | (t >>> 25))) | 0;
    t = (d + ((a & b) | (~a & c)) + x1 + -389564586) | 0;
    d = (a + ((t << 12) | (t >>> 20))) | 0;
    t = (c + ((d & a) | (~d & b)) + x2 + 606105819) | 0;
    c = (d + ((t << 17) | (t >>> 15))) | 0;
    t = (b + ((c & d) | (~c & a)) + x3 + -1044525330) | 0;
    b = (c + ((t << 22) | (t >>> 10))) | 0;
    t = (a + ((b & c) | (~b & d)) + x4 + -176418897) | 0;
    a = (b + ((t << 7) | (t >>> 25))) | 0;
    t = (d + ((a & b) | (~a & c)) + x5 + 1200080426) | 0;
    d = (a + ((t << 12) | (t >>> 20))) | 0;
    t = (c + ((d & a) | (~d & b)) + x6 + -1473231341) | 0;
    c = (d + ((t << 17) | (t >>> 15))) | 0;
    t = (b + ((c & d) | (~c & a)) + x7 + -45705983) | 0;
    b = (c + ((t << 22) | (t >>> 10))) | 0;
    t = (a + ((b & c) | (~b & d)) + x8 + 1770035416) | 0;
    a = (b + ((t << 7) | (t >>> 25))) | 0;
    t = (d + ((a & b) | (~a & c)) + x9 + -1958414417) | 0;
    d = (a + ((t << 12) | (t >>> 20))) | 0;
    t = (c + ((d & a) | (~d & b)) + x10 + -42063) | 0;
    c = (d + ((t << 17) | (t >>> 15))) | 0;
    t = (b + ((c & d) | (~c & a)) + x11 + -1990404162) | 0;
    b = (c + ((t << 22) | (t >>> 10))) | 0;
    t = (a + ((b & c) | (~b & d)) + x12 + 1804603682) | 0;
    a = (b + ((t << 7) | (t >>> 25))) | 0;
    t = (d + ((a & b) | (~a & c)) + x13 + -40341101) | 0;
    d = (a + ((t << 12) | (t >>> 20))) | 0;
    t = (c + ((d & a) | (~d & b)) + x14 + -1502002290) | 0;
    c = (d + ((t << 17) | (t >>> 15))) | 0;
    t = (b + ((c & d) | (~c & a)) + x15 + 1236535329) | 0;
    b = (c + ((t << 22) | (t >>> 10))) | 0;
    t = (a + ((d & b) | (~d & c)) + x1 + -165796510) | 0;
    a = (b + ((t << 5) | (t >>> 27))) | 0;
    t = (d + ((c & a) | (~c & b)) + x6 + -1069501632) | 0;
    d = (a + ((t << 9) | (t >>> 23))) | 0;
    t = (c + ((b & d) | (~b & a)) + x11 + 643717713) | 0;
    c = (d + ((t << 14) | (t >>> 18))) | 0;
    t = (b + ((a & c) | (~a & d)) + x0 + -373897302) | 0;
    b = (c + ((t << 20) | (t >>> 12))) | 0;
    t = (a + ((d & b) | (~d & c)) + x5 + -701558691) | 0;
    a = (b + ((t << 5) | (t >>> 27))) | 0;
    t = (d + ((c & a) | (~c & b)) + x10 + 38016083) | 0;
    d = (a + ((t << 9) | (t >>> 23))) | 0;
    t = (c + ((b & d) | (~b & a)) + x15 + -660478335) | 0;
    c = (d + ((t << 14) | (t >>> 18))) | 0;
    t = (b + ((a & c) | (~a & d)) + x4 + -405537848) | 0;
    b = (c + ((t << 20) | (t >>> 12))) | 0;
    t = (a + ((d & b) | (~d & c)) + x9 + 568446438) | 0;
    a = (b + ((t << 5) | (t >>> 27))) | 0;
    t = (d + ((c & a) | (~c & b)) + x14 + -1019803690) | 0;
    d = (a + ((t << 9) | (t >>> 23))) | 0;
    t = (c + ((b & d) | (~b & a)) + x3 + -187363961) | 0;
    c = (d + ((t << 14) | (t >>> 18))) | 0;
    t = (b + ((a & c) | (~a & d)) + x8 + 1163531501) | 0;
    b = (c + ((t << 20) | (t >>> 12))) | 0;
    t = (a + ((d & b) | (~d & c)) + x13 + -1444681467) | 0;
    a = (b + ((t << 5) | (t >>> 27))) | 0;
    t = (d + ((c & a) | (~c & b)) + x2 + -51403784) | 0;
    d = (a + ((t << 9) | (t >>> 23))) | 0;
    t = (c + ((b & d) | (~b & a)) + x7 + 1735328473) | 0;
    c = (d + ((t << 14) | (t >>> 18))) | 0;
    t = (b + ((a & c) | (~a & d)) + x12 + -1926607734) | 0;
    b = (c + ((t << 20) | (t >>> 12))) | 0;
    t = (a + (b ^ c ^ d) + x5 + -378558) | 0;
    a = (b + ((t << 4) | (t >>> 28))) | 0;
    t = (d + (a ^ b ^ c) + x8 + -2022574463) | 0;
    d = (a + ((t << 11) | (t >>> 21))) | 0;
    t = (c + (d ^ a ^ b) + x11 + 1839030562) | 0;
    c = (d + ((t << 16) | (t >>> 16))) | 0;
    t = (b + (c ^ d ^ a) + x14 + -35309556) | 0;
    b = (c + ((t << 23) | (t >>> 9))) | 0;
    t = (a + (b ^ c ^ d) + x1 + -1530992060) | 0;
    a = (b + ((t << 4) | (t >>> 28))) | 0;
    t = (d + (a ^ b ^ c) + x4 + 1272893353) | 0;
    d = (a + ((t << 11) | (t >>> 21))) | 0;
    t = (c + (d ^ a ^ b) + x7 + -155497632) | 0;
    c = (d + ((t << 16) | (t >>> 16))) | 0;
    t = (b + (c ^ d ^ a) + x10 + -1094730640) | 0;
    b = (c + ((t << 23) | (t >>> 9))) | 0;
    t = (a + (b ^ c ^ d) + x13 + 681279174) | 0;
    a = (b + ((t << 4) | (t >>> 28))) | 0;
    t = (d + (a ^ b ^ c) + x0 + -358537222) | 0;
    d = (a + ((t << 11) | (t >>> 21))) | 0;
    t = (c + (d ^ a ^ b) + x3 + -722521979) | 0;
    c = (d + ((t << 16) | (t >>> 16))) | 0;
    t = (b + (c ^ d ^ a) + x6 + 76029189) | 0;
    b = (c + ((t << 23) | (t >>> 9))) | 0;
    t = (a + (b ^ c ^ d) + x9 + -640364487) | 0;
    a = (b + ((t << 4) | (t >>> 28))) | 0;
    t = (d + (a ^ b ^ c) + x12 + -421815835) | 0;
    d = (a + ((t << 11) | (t >>> 21))) | 0;
    t = (c + (d ^ a ^ b) + x15 + 530742520) | 0;
    c = (d + ((t << 16) | (t >>> 16))) | 0;
    t = (b + (c ^ d ^ a) + x2 + -995338651) | 0;
    b = (c + ((t << 23) | (t >>> 9))) | 0;
    t = (a + (c ^ (b | ~d)) + x0 + -198630844) | 0;
    a = (b + ((t << 6) | (t >>> 26))) | 0;
    t = (d + (b ^ (a | ~c)) + x7 + 1126891415) | 0;
    d = (a + ((t << 10) | (t >>> 22))) | 0;
    t = (c + (a ^ (d | ~b)) + x14 + -1416354905) | 0;
    c = (d + ((t << 15) | (t >>> 17))) | 0;
    t = (b + (d ^ (c | ~a)) + x5 + -57434055) | 0;
    b = (c + ((t << 21) | (t >>> 11))) | 0;
    t = (a + (c ^ (b | ~d)) + x12 + 1700485571) | 0;
    a = (b + ((t << 6) | (t >>> 26))) | 0;
    t = (d + (b ^ (a | ~c)) + x3 + -1894986606) | 0;
    d = (a + ((t << 10) | (t >>> 22))) | 0;
    t = (c + (a ^ (d | ~b)) + x10 + -1051523) | 0;
    c = (d + ((t << 15) | (t >>> 17))) | 0;
    t = (b + (d ^ (c | ~a)) + x1 + -2054922799) | 0;
    b = (c + ((t << 21) | (t >>> 11))) | 0;
    t = (a + (c ^ (b | ~d)) + x8 + 1873313359) | 0;
    a = (b + ((t << 6) | (t >>> 26))) | 0;
    t = (d + (b ^ (a | ~c)) + x15 + -30611744) | 0;
    d = (a + ((t << 10) | (t >>> 22))) | 0;
    t = (c + (a ^ (d | ~b)) + x6 + -1560198380) | 0;
    c = (d + ((t << 15) | (t >>> 17))) | 0;
    t = (b + (d ^ (c | ~a)) + x13 + 1309151649) | 0;
    b = (c + ((t << 21) | (t >>> 11))) | 0;
    t = (a + (c ^ (b | ~d)) + x4 + -145523070) | 0;
    a = (b + ((t << 6) | (t >>> 26))) | 0;
    t = (d + (b ^ (a | ~c)) + x11 + -1120210379) | 0;
    d = (a + ((t << 10) | (t >>> 22))) | 0;
    t = (c + (a ^ (d | ~b)) + x2 + 718787259) | 0;
    c = (d + ((t << 15) | (t >>> 17))) | 0;
    t = (b + (d ^ (c | ~a)) + x9 + -343485551) | 0;
    b = (c + ((t << 21) | (t >>> 11))) | 0;
    a0 = (a0 + a) | 0;
    b0 = (b0 + b) | 0;
    c0 = (c0 + c) | 0;
    d0 = (d0 + d) | 0;
  }
  // The digest's bytes are a0 then b0, each little-endian: read big-endian, each is byte-swapped.
  out[0] = bswap(a0);
  out[1] = bswap(b0);
}

// keel-v1's batch checksum as it runs: row hashes (the first 8 digest bytes as the two big-endian 32-bit halves
// md5Prefix writes) summed mod 2^64, kept as two halves in plain numbers (a BigInt addition per row costs about as
// much as the hash); the checksum in decimal.
export class RowHashSum {
  private hi = 0;
  private lo = 0;
  count = 0;

  // Adds `rows` row hashes whose sum mod 2^64 is hi:lo (each half below 2^32): one row's hash, or another sum's.
  add(hi: number, lo: number, rows = 1): void {
    lo += this.lo;
    hi += this.hi;
    if (lo >= 4294967296) {
      lo -= 4294967296;
      hi += 1;
    }
    if (hi >= 4294967296) hi -= 4294967296;
    this.lo = lo;
    this.hi = hi;
    this.count += rows;
  }

  addSum(other: RowHashSum): void {
    this.add(other.hi, other.lo, other.count);
  }

  get checksum(): string {
    return ((BigInt(this.hi) << 32n) + BigInt(this.lo)).toString(10);
  }
}

// ---- keel-v1 of rows read back as PostgreSQL COPY TO text ----
// The PostgreSQL target checks what it stored by reading the rows' canonical texts back as one COPY TO (one line a
// row, fields tab-separated, \N NULL, COPY's escapes) and hashing them here: the server then formats the texts only,
// instead of also building each row's record literal and running md5() per row (bench/README.md, runs 1200–1229).
// The bytes are the server's UTF-8, the same bytes its md5() would hash; each field is unescaped straight into the
// record literal in MD5's buffer (no string per row or field).

// COPY TO's escapes: a backslash, then b f n r t v for those control characters, anything else for itself.
const UNESCAPE = new Uint8Array(256).map((_, i) => i);
UNESCAPE[0x62] = 0x08; // \b
UNESCAPE[0x66] = 0x0c; // \f
UNESCAPE[0x6e] = 0x0a; // \n
UNESCAPE[0x72] = 0x0d; // \r
UNESCAPE[0x74] = 0x09; // \t
UNESCAPE[0x76] = 0x0b; // \v

// How CopyTextSums reads a field: its canonical text, or a date/time value as PostgreSQL prints it under DateStyle
// ISO and TimeZone UTC (date_out, timestamp_out, timestamptz_out: `YYYY-MM-DD[ HH:MM:SS[.f…]][+00]`, the fraction
// without trailing zeros, none when zero), written as its canonical text (checksum.ts: the fraction to six digits, a
// T, a Z for timestamptz). A value the canonical text cannot carry (an infinity, a BC date, a year after 9999) is
// written as transferSql.ts pgCanonical writes it: its mark `!`, then the value as PostgreSQL prints it. So the
// server prints the value instead of formatting it with to_char (~0.37 µs a row on PostgreSQL 15).
export const READ_TEXT = 0;
export const READ_DATE = 1;
export const READ_TIMESTAMP = 2;
export const READ_TIMESTAMPTZ = 3;

const badTemporal = (b: Uint8Array, s: number, e: number) =>
  new Error(
    `COPY text: "${Buffer.from(b.subarray(s, e)).toString('latin1')}" is not a date/time printed with DateStyle ISO and TimeZone UTC`,
  );

// The canonical text of the date/time field b[s, e) (READ_DATE…) into the record literal at pos; the position after.
function putTemporal(b: Uint8Array, s: number, e: number, pos: number, kind: number): number {
  const l = buf;
  const len = e - s;
  // In range: a four-digit year (0001-9999: a later year has more digits, an infinity none) and not BC.
  if (len >= 10 && b[s + 4] === 0x2d && b[e - 1] !== 0x43 /* C of " BC" */) {
    for (let i = s; i < s + 10; i++) l[pos++] = b[i]!; // YYYY-MM-DD
    if (kind === READ_DATE) {
      if (len !== 10) throw badTemporal(b, s, e);
      return pos;
    }
    // " HH:MM:SS", then ".f…" (1-6 digits), then "+00" for timestamptz
    const end = kind === READ_TIMESTAMPTZ ? e - 3 : e;
    if (len < 19 || b[s + 10] !== 0x20) throw badTemporal(b, s, e);
    if (kind === READ_TIMESTAMPTZ && (b[end] !== 0x2b || b[end + 1] !== 0x30 || b[end + 2] !== 0x30))
      throw badTemporal(b, s, e);
    l[pos++] = 0x54; // T
    for (let i = s + 11; i < s + 19; i++) l[pos++] = b[i]!;
    l[pos++] = 0x2e; // .
    let digits = 0;
    if (end > s + 19) {
      if (b[s + 19] !== 0x2e || end - (s + 20) > 6 || end - (s + 20) < 1) throw badTemporal(b, s, e);
      for (let i = s + 20; i < end; i++, digits++) l[pos++] = b[i]!;
    } else if (end !== s + 19) throw badTemporal(b, s, e);
    for (; digits < 6; digits++) l[pos++] = 0x30;
    if (kind === READ_TIMESTAMPTZ) l[pos++] = 0x5a; // Z
    return pos;
  }
  // Out of range: "!" and the printed value, quoted when it holds a space (" BC") as the record literal quotes it.
  let quote = false;
  for (let i = s; i < e; i++) {
    const c = b[i]!;
    if (c === 0x5c) throw badTemporal(b, s, e);
    if (c < 0x80 && QUOTING[c] !== 0) quote = true;
  }
  if (quote) l[pos++] = 0x22;
  l[pos++] = 0x21; // !
  for (let i = s; i < e; i++) {
    if (QUOTING[b[i]!] === 2) l[pos++] = b[i]!;
    l[pos++] = b[i]!;
  }
  if (quote) l[pos++] = 0x22;
  return pos;
}

// The keel-v1 sum and count of rows given as COPY TO text in pieces split anywhere (as a COPY stream delivers them).
// One pass over the bytes: each field is written into the record literal as it is read, and written again quoted
// (from its start) only when it holds a character that quotes it (as putField).
export class CopyTextSums {
  private readonly sum = new RowHashSum();
  private rest: Uint8Array | null = null;
  private readonly out = new Uint32Array(2);

  private readonly kinds: Uint8Array;

  // `kinds`: per field, how it is read (READ_TEXT: the canonical text itself; READ_DATE, READ_TIMESTAMP,
  // READ_TIMESTAMPTZ: the value as PostgreSQL prints it with DateStyle ISO and TimeZone UTC, made canonical here).
  constructor(widthOrKinds: number | readonly number[]) {
    this.kinds = typeof widthOrKinds === 'number' ? new Uint8Array(widthOrKinds) : Uint8Array.from(widthOrKinds);
    this.width = this.kinds.length;
  }

  private readonly width: number;

  push(data: Uint8Array): void {
    let b = data;
    if (this.rest) {
      const joined = new Uint8Array(this.rest.length + data.length);
      joined.set(this.rest);
      joined.set(data, this.rest.length);
      b = joined;
      this.rest = null;
    }
    const n = b.length;
    const width = this.width;
    const kinds = this.kinds;
    // Room for any row of these bytes: unescaped no longer than escaped, doubled at most twice, per field a separator
    // and two quotes, the parentheses.
    reserve(0, n * 2 + width * 3 + 2);
    const l = buf;
    let p = 0; // the row's start
    rows: while (p < n) {
      let pos = 0;
      l[pos++] = 0x28; // (
      let fields = 0;
      let i = p;
      for (;;) {
        if (fields > 0) l[pos++] = 0x2c; // ,
        fields++;
        const fs = i;
        const start = pos;
        if (i >= n) break rows; // the row goes on in the next piece
        let c = b[i]!;
        if (c === 0x5c && i + 2 >= n) break rows; // (an escape or \N, and the rest in the next piece)
        const kind = fields <= width ? kinds[fields - 1]! : READ_TEXT;
        if (c === 0x5c && b[i + 1] === 0x4e && (b[i + 2] === 0x09 || b[i + 2] === 0x0a)) {
          i += 2; // \N: NULL, an empty field of the literal
          c = b[i]!;
        } else if (kind !== READ_TEXT) {
          let fe = i;
          while (fe < n && b[fe] !== 0x09 && b[fe] !== 0x0a) fe++;
          if (fe >= n) break rows;
          pos = putTemporal(b, i, fe, pos, kind);
          i = fe;
          c = b[i]!;
        } else if (c === 0x09 || c === 0x0a) {
          l[pos++] = 0x22; // an empty string: ""
          l[pos++] = 0x22;
        } else {
          let quoted = false;
          for (;;) {
            if (i >= n) break rows;
            c = b[i]!;
            if (c === 0x09 || c === 0x0a) break;
            if (c === 0x5c) {
              if (i + 1 >= n) break rows;
              c = b[++i]!;
              if (c === 0x09 || c === 0x0a) throw new Error('COPY text: a field ends in a backslash');
              c = UNESCAPE[c]!;
            }
            if (c < 0x80 && QUOTING[c] !== 0) {
              quoted = true;
              break;
            }
            l[pos++] = c;
            i++;
          }
          if (quoted) {
            // Again from the field's start, inside quotes, " and \ doubled.
            pos = start;
            l[pos++] = 0x22;
            for (i = fs; ; i++) {
              if (i >= n) break rows;
              c = b[i]!;
              if (c === 0x09 || c === 0x0a) break;
              if (c === 0x5c) {
                if (i + 1 >= n) break rows;
                c = b[++i]!;
                if (c === 0x09 || c === 0x0a) throw new Error('COPY text: a field ends in a backslash');
                c = UNESCAPE[c]!;
              }
              if (c < 0x80 && QUOTING[c] === 2) l[pos++] = c;
              l[pos++] = c;
            }
            l[pos++] = 0x22;
          }
        }
        i++; // past the tab or newline
        if (c === 0x0a) break;
      }
      if (fields !== width) throw new Error(`COPY row with ${fields} fields, expected ${width}`);
      l[pos++] = 0x29; // )
      const out = this.out;
      md5Buffered(pos, out);
      this.sum.add(out[0]!, out[1]!);
      p = i;
    }
    // An unfinished row waits for the rest (a copy: the stream may hand out views of a buffer it reuses).
    if (p < n) this.rest = b.slice(p);
  }

  // Throws when the text ended inside a row.
  end(): void {
    if (this.rest) throw new Error('COPY text ended inside a row');
  }

  get count(): number {
    return this.sum.count;
  }

  get checksum(): string {
    return this.sum.checksum;
  }
}
