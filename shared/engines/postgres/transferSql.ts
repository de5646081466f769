// PostgreSQL side of the keel-v1 checksum (shared/transfer/checksum.ts) and the type mapping for transfers.
import { PG1_PREFIX, PG2_PREFIX, type ChecksumAlgorithm, type LogicalType } from '../../transfer/checksum.js';

export function pgLogicalType(formatted: string): LogicalType | null {
  const t = formatted.toLowerCase();
  if (t === 'smallint' || t === 'integer' || t === 'bigint') return 'int';
  if (t === 'numeric' || t.startsWith('numeric(')) return 'decimal';
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

// Canonical text of one (already quoted) column reference; NULL stays NULL.
export function pgCanonical(ref: string, type: LogicalType): string {
  switch (type) {
    case 'int':
    case 'text':
    case 'uuid':
      return `(${ref})::text`;
    case 'decimal':
      return `trim_scale(${ref})::text`;
    case 'bool':
      return `(case when ${ref} then 't' when not ${ref} then 'f' end)`;
    case 'date':
      return `to_char(${ref}, 'YYYY-MM-DD')`;
    case 'timestamp':
      return `to_char(${ref}, 'YYYY-MM-DD"T"HH24:MI:SS.US')`;
    case 'timestamptz':
      return `to_char((${ref}) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
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
  set_config('bytea_output', 'hex', true), set_config('intervalstyle', 'postgres', true)`;

// keel-pg2 field of one column (see shared/transfer/checksum.ts): hashed by its exact value with full 64-bit strength.
// `declared` is the column's declared type on the side that runs the query (character(n) keeps its padding).
export function pg2Field(ref: string, type: LogicalType, declared?: string): string {
  switch (type) {
    case 'int':
      return `int8send((${ref})::bigint)`;
    case 'decimal':
      return `numeric_send(trim_scale(${ref}))`;
    case 'text':
      return declared !== undefined && /^character(\(\d+\))?$/i.test(declared)
        ? `(textin(bpcharout(${ref})) collate "C")`
        : `((${ref})::text collate "C")`;
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
): string {
  const rowHash =
    algorithm === 'keel-pg2'
      ? `hash_record_extended(row(${cols.map((c) => pg2Field(c.ref, c.type, c.declared)).join(', ')}), 0)`
      : algorithm === 'keel-pg1'
        ? `hashtextextended(row(${cols.map((c) => (c.type === 'decimal' ? `trim_scale(${c.ref})` : c.ref)).join(', ')})::text, 0)`
        : `('x' || left(md5(row(${cols.map((c) => pgCanonical(c.ref, c.type)).join(', ')})::text), 16))::bit(64)::bigint`;
  const prefix =
    algorithm === 'keel-pg2' ? `'${PG2_PREFIX}' || ` : algorithm === 'keel-pg1' ? `'${PG1_PREFIX}' || ` : '';
  return `select count(*)::text as n, ${prefix}(mod(mod(coalesce(sum(${rowHash}), 0), ${TWO_64}) + ${TWO_64}, ${TWO_64}))::text as checksum
            from ${from} where ${where}`;
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
