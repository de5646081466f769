// PostgreSQL side of the keel-v1 checksum (shared/transfer/checksum.ts) and the type mapping for transfers.
import type pg from 'pg';
import { copyOut } from './copyStreams.js';
import { CopyTextSums, READ_DATE, READ_TEXT, READ_TIMESTAMP, READ_TIMESTAMPTZ } from '../../transfer/md5.js';
import {
  COPY_TEXT,
  copyTextHashing,
  PG1_PREFIX,
  type CanonicalChunk,
  PG2_PREFIX,
  type CanonicalRow,
  type ChecksumAlgorithm,
  type LogicalType,
} from '../../transfer/checksum.js';
import type { TypeFacets } from '../../transfer/types.js';

export function pgLogicalType(formatted: string): LogicalType | null {
  const t = formatted.toLowerCase();
  if (t === 'smallint' || t === 'integer' || t === 'bigint') return 'int';
  if (t === 'numeric' || t.startsWith('numeric(')) return 'decimal';
  if (t === 'double precision' || t === 'real') return 'float'; // only through a declared float policy
  if (t === 'text' || t.startsWith('character varying') || t === 'character' || t.startsWith('character('))
    return 'text';
  if (t === 'boolean') return 'bool';
  if (t === 'date') return 'date';
  if (/^timestamp(\(\d\))? without time zone$/.test(t)) return 'timestamp';
  if (/^timestamp(\(\d\))? with time zone$/.test(t)) return 'timestamptz';
  if (t === 'bytea') return 'bytes';
  if (t === 'uuid') return 'uuid';
  return null;
}

const isFixedChar = (declared: string | undefined) => declared !== undefined && /^character(\(\d+\))?$/i.test(declared);

// The bounds of a declared PostgreSQL type (format_type's text), for prepare's checks on the target.
export function pgFacets(declared: string, logical: LogicalType): TypeFacets {
  const t = declared.toLowerCase();
  const n = /\((\d+)(?:,(\d+))?\)/.exec(t);
  switch (logical) {
    case 'text': {
      const chars = n ? Number(n[1]) : t === 'character' ? 1 : null;
      return { maxChars: chars, maxBytes: chars === null ? null : 4 * chars, fixed: isFixedChar(declared) };
    }
    case 'int':
      return { intBits: t === 'smallint' ? 16 : t === 'integer' ? 32 : 64 };
    case 'decimal':
      return n ? { precision: Number(n[1]), scale: Number(n[2] ?? 0) } : { precision: null, scale: null };
    case 'timestamp':
    case 'timestamptz':
      return { fraction: n ? Number(n[1]) : 6 };
    case 'bytes':
      return { maxBytes: null };
    default:
      return {};
  }
}

// A date or time value the canonical text cannot carry: +-infinity, a BC date, a year after 9999 (review F8). Such a
// value has no canonical form (YYYY-MM-DD...), and to_char would print NULL for infinity and drop the era of a BC
// date, with both checksums agreeing on the changed value.
// Two comparisons with constants and nothing else (it runs for every value the row path formats or verifies): an
// infinity fails one of them, so no isfinite(); a timestamptz is compared as it is, with bounds at UTC, rather than
// converted to UTC first (explicit offsets: the bounds do not depend on the session's time zone).
export function pgTemporalOutOfRange(ref: string, type: 'date' | 'timestamp' | 'timestamptz'): string {
  const [lo, hi] =
    type === 'timestamptz'
      ? [`timestamptz '0001-01-01 00:00:00+00'`, `timestamptz '10000-01-01 00:00:00+00'`]
      : [`${type} '0001-01-01'`, `${type} '10000-01-01'`];
  return `not ((${ref}) >= ${lo} and (${ref}) < ${hi})`;
}

// Marks an out-of-range date/time value in canonical rows: "!" then the value as PostgreSQL prints it. No canonical
// text starts with "!", so the source refuses the row (transferSource.ts) and no target could parse it.
export const PG_OUT_OF_RANGE_MARK = '!';

function temporal(ref: string, type: 'date' | 'timestamp' | 'timestamptz', formatted: string): string {
  return `(case when ${pgTemporalOutOfRange(ref, type)} then '${PG_OUT_OF_RANGE_MARK}' || (${ref})::text else ${formatted} end)`;
}

// Canonical text of one (already quoted) column reference; NULL stays NULL. `declared`: the column's declared type
// on the side that runs the query; a character(n) value keeps its blank padding (as Oracle CHAR(n) and SQL Server
// char(n) return it, and as keel-pg2 hashes it), so a fixed-width column checksums alike on every engine (review F9).
export function pgCanonical(ref: string, type: LogicalType, declared?: string): string {
  switch (type) {
    case 'text':
      return isFixedChar(declared) ? `textin(bpcharout(${ref}))` : `(${ref})::text`;
    case 'int':
    case 'uuid':
      return `(${ref})::text`;
    case 'decimal':
      return `trim_scale(${ref})::text`;
    case 'float':
      // shortest text of the double (extra_float_digits > 0, PostgreSQL 12+), written without exponent
      return `trim_scale((${ref})::text::numeric)::text`;
    case 'bool':
      return `(case when ${ref} then 't' when not ${ref} then 'f' end)`;
    case 'date':
      return temporal(ref, type, `to_char(${ref}, 'YYYY-MM-DD')`);
    case 'timestamp':
      return temporal(ref, type, `to_char(${ref}, 'YYYY-MM-DD"T"HH24:MI:SS.US')`);
    case 'timestamptz':
      return temporal(ref, type, `to_char((${ref}) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`);
    case 'bytes':
      return `encode(${ref}, 'hex')`;
  }
}

const TWO_64 = '18446744073709551616';

// count(*) and the keel-v1 checksum of the given columns over `from ... where ...`: the canonical text of each
// column, encoded as a PostgreSQL record literal (row(...)::text), hashed with md5, and the first 8 bytes summed
// as uint64 modulo 2^64 (decimal text). See shared/transfer/checksum.ts for the definition.
// keel-pg1 prints typed values: the session must run with these settings (transaction-local).
export const PG_CHECKSUM_SETTINGS_SQL = `select set_config('timezone', 'UTC', true), set_config('datestyle', 'ISO, YMD', true),
  set_config('bytea_output', 'hex', true), set_config('intervalstyle', 'postgres', true), set_config('extra_float_digits', '1', true)`;

// A statement planned for one process (transaction-local): no parallel workers.
export const PG_ONE_PROCESS_SQL = `select set_config('max_parallel_workers_per_gather', '0', true)`;

// keel-pg2 field of one column (see shared/transfer/checksum.ts): hashed by its exact value with full 64-bit strength.
// `declared` is the column's declared type on the side that runs the query (character(n) keeps its padding).
export function pg2Field(ref: string, type: LogicalType, declared?: string): string {
  switch (type) {
    case 'int':
      return `int8send((${ref})::bigint)`;
    case 'decimal':
      return `numeric_send(trim_scale(${ref}))`;
    case 'float':
      return `numeric_send(trim_scale((${ref})::text::numeric))`;
    case 'text':
      return isFixedChar(declared) ? `(textin(bpcharout(${ref})) collate "C")` : `((${ref})::text collate "C")`;
    case 'date':
      return `date_send(${ref})`;
    case 'timestamp':
      return `timestamp_send(${ref})`;
    case 'timestamptz':
      return `timestamptz_send(${ref})`;
    case 'bool':
    case 'bytes':
    case 'uuid':
      return ref;
  }
}

export function pgChecksumQuery(
  cols: { ref: string; type: LogicalType; declared?: string }[],
  from: string,
  where: string,
  algorithm: ChecksumAlgorithm = 'keel-v1',
  extra: string[] = [], // more select expressions over the same rows
): string {
  const rowHash =
    algorithm === 'keel-pg2'
      ? `hash_record_extended(row(${cols.map((c) => pg2Field(c.ref, c.type, c.declared)).join(', ')}), 0)`
      : algorithm === 'keel-pg1'
        ? `hashtextextended(row(${cols.map((c) => (c.type === 'decimal' ? `trim_scale(${c.ref})` : c.ref)).join(', ')})::text, 0)`
        : `('x' || left(md5(row(${cols.map((c) => pgCanonical(c.ref, c.type, c.declared)).join(', ')})::text), 16))::bit(64)::bigint`;
  const prefix =
    algorithm === 'keel-pg2' ? `'${PG2_PREFIX}' || ` : algorithm === 'keel-pg1' ? `'${PG1_PREFIX}' || ` : '';
  const more = extra.length ? `, ${extra.join(', ')}` : '';
  return `select count(*)::text as n${more}, ${prefix}(mod(mod(coalesce(sum(${rowHash}), 0), ${TWO_64}) + ${TWO_64}, ${TWO_64}))::text as checksum
            from ${from} where ${where}`;
}

// count(*) and the keel-v1 checksum of the given columns over `from ... where ...`, as pgChecksumQuery's, with the
// rows read back as one COPY TO and hashed in Node (md5.ts, CopyTextSums): the server prints the values only, where
// md5() per row (a digest context made and freed per call on PostgreSQL 15 with OpenSSL 3), the record literal, the
// sum and to_char of dates and times cost it ~1.8 µs a row more (bench/README.md, runs 840–859 and 1200–1229). Each
// column is its canonical text (pgCanonical), except a date, timestamp or timestamptz column of that declared type:
// its value as PostgreSQL prints it (DateStyle ISO, TimeZone UTC, set here), made canonical by CopyTextSums, the same
// text to_char gives and the same out-of-range mark. The bytes hashed are those the server's md5() would hash, read
// in the caller's transaction (its writes included), on one process (Node hashes on the other core).
// COPY takes no bind parameters: `where` reads its values from the transaction-local settings `settings` (keel.*
// names), set here first. An error may leave the COPY open: the caller destroys the connection (the direct apply and
// the staging do for any error that is not a TransferError).
export async function pgReadBackSums(
  client: pg.ClientBase,
  cols: { ref: string; type: LogicalType; declared?: string }[],
  from: string,
  where: string,
  settings: Record<string, string | null>,
): Promise<{ rowCount: number; checksum: string }> {
  const names = Object.keys(settings);
  for (const name of names) if (!/^keel\.[a-z_]+$/.test(name)) throw new Error(`pgReadBackSums: setting ${name}`);
  await client.query(
    `select set_config('timezone', 'UTC', true), set_config('datestyle', 'ISO, YMD', true),
            set_config('max_parallel_workers_per_gather', '0', true)${names.map((n, i) => `, set_config('${n}', coalesce($${i + 1}, ''), true)`).join('')}`,
    names.map((n) => settings[n]),
  );
  const kinds = cols.map((c) => readKind(c.type, c.declared));
  const texts = cols.map((c, i) => (kinds[i] === READ_TEXT ? pgCanonical(c.ref, c.type, c.declared) : c.ref));
  const sums = new CopyTextSums(kinds);
  const stream = client.query(copyOut(`copy (select ${texts.join(', ')} from ${from} where ${where}) to stdout`));
  for await (const data of stream as AsyncIterable<Buffer>) sums.push(data);
  sums.end();
  return { rowCount: sums.count, checksum: sums.checksum };
}

// How a read-back column is printed: a date/time column of its own declared type as its value (CopyTextSums makes it
// canonical), anything else as its canonical text.
function readKind(type: LogicalType, declared: string | undefined): number {
  if (declared === undefined || pgLogicalType(declared) !== type) return READ_TEXT;
  return type === 'date'
    ? READ_DATE
    : type === 'timestamp'
      ? READ_TIMESTAMP
      : type === 'timestamptz'
        ? READ_TIMESTAMPTZ
        : READ_TEXT;
}

export function pgCastFor(type: LogicalType): string {
  switch (type) {
    case 'int':
      return 'bigint';
    case 'timestamp':
      return 'timestamp';
    case 'timestamptz':
      return 'timestamptz';
    default:
      throw new Error(`${type} cannot be a boundary`);
  }
}

// COPY text format: backslash, tab, newline and carriage return escaped; NULL is \N. (Most fields need nothing:
// a test is cheaper than a replace that finds nothing.)
const COPY_SPECIAL = /[\\\t\n\r]/;
function copyField(v: string | null, type: LogicalType): string {
  if (v === null) return '\\N';
  const s = type === 'bytes' ? `\\x${v}` : v;
  if (!COPY_SPECIAL.test(s)) return s;
  return s.replace(/[\\\t\n\r]/g, (ch) => (ch === '\\' ? '\\\\' : ch === '\t' ? '\\t' : ch === '\n' ? '\\n' : '\\r'));
}

// Canonical rows as COPY text lines (the canonical text is what PostgreSQL's input functions read: the row path's
// staging and its direct apply write it unchanged). Only text and bytes fields go through copyField: the canonical
// text of every other type (digits, '-', '.', ':', 'T', 'Z', t/f, hex) holds nothing COPY escapes, so its test per
// field found nothing (~4 of 6 fields a row in the bench's shape, bench/README.md runs 840–859). A value that broke
// that would fail the COPY or, read otherwise, the target's check of what it stored.
export function copyText(rows: CanonicalRow[], types: readonly LogicalType[]): string {
  const escaped = types.map((t) => t === 'text' || t === 'bytes');
  let buf = '';
  for (const row of rows) {
    for (let i = 0; i < types.length; i++) {
      if (i > 0) buf += '\t';
      const v = row[i] ?? null;
      buf += escaped[i] ? copyField(v, types[i]!) : v === null ? '\\N' : v;
    }
    buf += '\n';
  }
  return buf;
}

// A chunk as COPY text: the source's own COPY text when it carries it (checksum.ts, COPY_TEXT), else copyText. A
// source's COPY TO text reads back as the same canonical strings (its escapes are COPY FROM's), except a bytes column,
// whose canonical hex needs the \x prefix copyText adds.
export function copyChunk(rows: CanonicalChunk, types: readonly LogicalType[]): string | Buffer {
  const raw = rows[COPY_TEXT];
  if (raw !== undefined && !types.includes('bytes')) return raw;
  // A chunk the service will hash (one source read): its COPY text and its keel-v1 hashes in one pass over the rows.
  return copyTextHashing(rows, types) ?? copyText(rows, types);
}
