// PostgreSQL side of the keel-v1 checksum (shared/transfer/checksum.ts) and the type mapping for transfers.
import type { LogicalType } from '../../transfer/checksum.js';

export function pgLogicalType(formatted: string): LogicalType | null {
  const t = formatted.toLowerCase();
  if (t === 'smallint' || t === 'integer' || t === 'bigint') return 'int';
  if (t === 'numeric' || t.startsWith('numeric(')) return 'decimal';
  if (t === 'text' || t.startsWith('character varying') || t === 'character' || t.startsWith('character(')) return 'text';
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

// The keel-v1 row encoding of the given columns.
export function pgRowEncoding(cols: { ref: string; type: LogicalType }[]): string {
  const parts = cols.map(({ ref, type }) => {
    const e = pgCanonical(ref, type);
    return `(case when ${ref} is null then 'N' else 'V' || octet_length(${e}) || ':' || ${e} end)`;
  });
  return parts.join(' || ');
}

const TWO_64 = '18446744073709551616';

// Aggregate: sum of the first 8 bytes of md5(row encoding) as uint64, modulo 2^64, as decimal text.
export function pgChecksumAggregate(cols: { ref: string; type: LogicalType }[]): string {
  const rowHash = `('x' || left(md5(${pgRowEncoding(cols)}), 16))::bit(64)::bigint::numeric`;
  return `(mod(mod(coalesce(sum(${rowHash}), 0), ${TWO_64}) + ${TWO_64}, ${TWO_64}))::text`;
}

export function pgCastFor(type: LogicalType): string {
  switch (type) {
    case 'int': return 'bigint';
    case 'timestamp': return 'timestamp';
    case 'timestamptz': return 'timestamptz';
    default: throw new Error(`${type} cannot be a boundary`);
  }
}
