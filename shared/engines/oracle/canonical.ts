// Canonical text <-> Oracle: which column types take a logical type, the SQL converting a bind into the column's
// value and a staged value back to canonical text, how a value is bound in executeMany, and what ALL_TAB_COLUMNS
// says a column holds.
import oracledb from 'oracledb';
import type { LogicalType } from '../../transfer/checksum.js';
import type { ColumnPolicy } from '../../transfer/policies.js';
import type { TargetColumnFacets } from '../../transfer/schema.js';

// Oracle column types that can hold a staged column of each logical type (after its declared policy).
export function oracleAccepts(
  logical: LogicalType,
  dataType: string,
  scale: number | null,
  policy: ColumnPolicy | null = null,
  precision: number | null = null,
): boolean {
  const t = dataType.toUpperCase();
  switch (logical) {
    case 'int':
      return t === 'NUMBER' && (scale === 0 || scale === null);
    case 'decimal':
      return t === 'NUMBER';
    case 'float':
      // the exact double: BINARY_DOUBLE, or an unconstrained NUMBER (its shortest decimal text, exactly)
      return t === 'BINARY_DOUBLE' || (t === 'NUMBER' && scale === null && precision === null);
    case 'text':
      return ['VARCHAR2', 'NVARCHAR2', 'CHAR', 'NCHAR', 'CLOB', 'NCLOB'].includes(t);
    case 'bool':
      return (t === 'NUMBER' && (scale === 0 || scale === null)) || t === 'BOOLEAN';
    case 'date':
      return t === 'DATE';
    case 'timestamp':
      // DATE holds whole seconds: only for a column that declared "datetime": "seconds"
      return /^TIMESTAMP\(\d\)$/.test(t) || (t === 'DATE' && policy?.kind === 'datetime_seconds');
    case 'timestamptz':
      return /^TIMESTAMP\(\d\) WITH (LOCAL )?TIME ZONE$/.test(t);
    case 'bytes':
      return t === 'RAW' || t === 'BLOB'; // bound and read back as Buffers
    case 'uuid':
      return t === 'RAW' || t === 'VARCHAR2' || t === 'CHAR';
  }
}

// SQL that turns the bind into the column's value: canonical text, except bytes (a Buffer) and doubles (a number).
export function fromCanonical(bind: string, logical: LogicalType, dataType: string): string {
  switch (logical) {
    case 'int':
    case 'decimal':
      return `TO_NUMBER(${bind})`;
    case 'float':
      return dataType.toUpperCase() === 'BINARY_DOUBLE' ? bind : `TO_NUMBER(${bind})`;
    case 'bool':
      // 23ai BOOLEAN columns take TRUE/FALSE; NUMBER(1) columns 1/0.
      return dataType.toUpperCase() === 'BOOLEAN'
        ? `CASE ${bind} WHEN 't' THEN TRUE WHEN 'f' THEN FALSE END`
        : `CASE ${bind} WHEN 't' THEN 1 WHEN 'f' THEN 0 END`;
    case 'date':
      return `TO_DATE(${bind}, 'YYYY-MM-DD')`;
    case 'timestamp':
      // a DATE column (declared "datetime": "seconds"): the policy already cut the fraction to .000000
      return dataType.toUpperCase() === 'DATE'
        ? `TO_DATE(SUBSTR(${bind}, 1, 19), 'YYYY-MM-DD"T"HH24:MI:SS')`
        : `TO_TIMESTAMP(${bind}, 'YYYY-MM-DD"T"HH24:MI:SS.FF6')`;
    case 'timestamptz':
      return `FROM_TZ(TO_TIMESTAMP(RTRIM(${bind}, 'Z'), 'YYYY-MM-DD"T"HH24:MI:SS.FF6'), 'UTC')`;
    case 'bytes':
      return bind;
    case 'uuid':
      return dataType.toUpperCase() === 'RAW' ? `HEXTORAW(REPLACE(${bind}, '-', ''))` : bind;
    case 'text':
      return bind;
  }
}

// How a staged value travels in executeMany: text as a string of at most the chunk's longest value (national
// character set for NVARCHAR2/NCHAR, so a non-Unicode database character set does not convert it on the way; a
// temporary LOB for CLOB/NCLOB, so a value over 4,000/32,767 bytes is not sent as a LONG), bytes as a Buffer (RAW: up
// to 32,767 bytes with MAX_STRING_SIZE = EXTENDED, else 2,000; BLOB: any size, a temporary LOB), a double as a number
// (exact; no decimal text parsed by the server).
export type OracleBindKind = 'string' | 'nstring' | 'clob' | 'nclob' | 'raw' | 'blob' | 'double';

export function oracleBindKind(logical: LogicalType, dataType: string): OracleBindKind {
  const t = dataType.toUpperCase();
  if (logical === 'bytes') return t === 'BLOB' ? 'blob' : 'raw';
  if (logical === 'float' && t === 'BINARY_DOUBLE') return 'double';
  if (logical === 'text') {
    if (t === 'NVARCHAR2' || t === 'NCHAR') return 'nstring';
    if (t === 'CLOB') return 'clob';
    if (t === 'NCLOB') return 'nclob';
  }
  return 'string';
}

// A LOB bind costs thin mode two round trips per value (create a temporary LOB, write it): a chunk whose values all
// fit the SQL limits of every server (RAW 2,000 bytes, VARCHAR2 4,000, NVARCHAR2 2,000 characters) binds them as
// RAW/VARCHAR2/NVARCHAR2 instead, which the INSERT converts to the LOB column.
export function bindDef(kind: OracleBindKind, maxSize: number): { type: oracledb.DbType | number; maxSize?: number } {
  switch (kind) {
    case 'raw':
      return { type: oracledb.DB_TYPE_RAW, maxSize };
    case 'blob':
      return maxSize <= 2000 ? { type: oracledb.DB_TYPE_RAW, maxSize } : { type: oracledb.DB_TYPE_BLOB };
    case 'double':
      return { type: oracledb.DB_TYPE_BINARY_DOUBLE };
    case 'clob':
      return maxSize <= 4000 ? { type: oracledb.STRING, maxSize } : { type: oracledb.DB_TYPE_CLOB };
    case 'nclob':
      return maxSize <= 2000 ? { type: oracledb.DB_TYPE_NVARCHAR, maxSize } : { type: oracledb.DB_TYPE_NCLOB };
    case 'nstring':
      return { type: oracledb.DB_TYPE_NVARCHAR, maxSize };
    case 'string':
      return { type: oracledb.STRING, maxSize };
  }
}

export function oracleBindValue(kind: OracleBindKind, v: string | null): string | Buffer | number | null {
  if (v === null) return null;
  if (kind === 'raw' || kind === 'blob') return Buffer.from(v, 'hex');
  if (kind === 'double') return Number(v);
  return v;
}

// SQL that reads a staged column back as canonical text (normalized once more by canonicalValue).
export function toCanonical(ref: string, logical: LogicalType, dataType: string): string {
  switch (logical) {
    case 'int':
    case 'decimal':
      return `TO_CHAR(${ref}, 'TM9')`;
    case 'float':
      return dataType.toUpperCase() === 'BINARY_DOUBLE' ? ref : `TO_CHAR(${ref}, 'TM9')`; // a double: read as a number
    case 'bool':
      return dataType.toUpperCase() === 'BOOLEAN'
        ? `CASE WHEN ${ref} THEN 't' WHEN NOT ${ref} THEN 'f' END`
        : `CASE WHEN ${ref} = 1 THEN 't' WHEN ${ref} = 0 THEN 'f' END`;
    case 'date':
      return `TO_CHAR(${ref}, 'YYYY-MM-DD')`;
    case 'timestamp':
      // (Oracle's || treats NULL as '': a suffix is added only to a value, or NULL would read back as '.000000')
      return dataType.toUpperCase() === 'DATE'
        ? `CASE WHEN ${ref} IS NOT NULL THEN TO_CHAR(${ref}, 'YYYY-MM-DD"T"HH24:MI:SS') || '.000000' END`
        : `TO_CHAR(${ref}, 'YYYY-MM-DD"T"HH24:MI:SS.FF6')`;
    case 'timestamptz':
      return `CASE WHEN ${ref} IS NOT NULL THEN TO_CHAR(SYS_EXTRACT_UTC(${ref}), 'YYYY-MM-DD"T"HH24:MI:SS.FF6') || 'Z' END`;
    case 'bytes':
      return ref; // RAW or BLOB, fetched as a Buffer and written as hex in JavaScript (no 4,000-character limit)
    case 'uuid':
      return dataType.toUpperCase() === 'RAW'
        ? `REGEXP_REPLACE(LOWER(RAWTOHEX(${ref})), '^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\\1-\\2-\\3-\\4-\\5')`
        : `LOWER(${ref})`;
    case 'text':
      // CHAR(n)/NCHAR(n) come back blank-padded, like a fixed-width source sends them (prepare admits only those)
      return ref;
  }
}

// An ALL_TAB_COLUMNS row: column_name, data_type, data_scale, data_precision, data_length, char_length, char_used,
// nullable.
export type TabColumnRow = [
  string,
  string,
  number | null,
  number | null,
  number | null,
  number | null,
  string | null,
  string,
];

// What an ALL_TAB_COLUMNS row (TabColumnRow, perhaps with more columns after) says the column holds, for prepare's
// checks (shared/transfer/schema.ts checkColumnFits).
export function oracleColumnFacets(row: readonly unknown[]): TargetColumnFacets {
  const [, dataType, scale, precision, dataLength, charLength, charUsed, nullable] = row as TabColumnRow;
  const t = dataType.toUpperCase();
  const f: TargetColumnFacets = { declared: t, nullable: nullable !== 'N' };
  if (['VARCHAR2', 'NVARCHAR2', 'CHAR', 'NCHAR'].includes(t)) {
    const chars = charUsed === 'C' || t.startsWith('N');
    f.declared = `${t}(${chars ? `${charLength} CHAR` : `${dataLength} BYTE`})`;
    if (chars) f.maxChars = charLength;
    else f.maxBytes = dataLength;
    f.fixed = t === 'CHAR' || t === 'NCHAR';
    if (f.fixed) f.maxChars = charLength; // padded to CHAR_LENGTH characters (to that many bytes with BYTE)
  } else if (t === 'NUMBER') {
    // NUMBER(*,S) has no DATA_PRECISION: 38 digits
    f.precision = precision ?? (scale !== null ? 38 : null);
    f.scale = scale;
    f.declared = precision === null && scale === null ? 'NUMBER' : `NUMBER(${precision ?? '*'},${scale ?? 0})`;
  } else if (/^TIMESTAMP/.test(t)) f.fraction = scale ?? 6;
  else if (t === 'DATE') f.fraction = 0;
  else if (t === 'RAW') {
    f.maxBytes = dataLength;
    f.declared = `RAW(${dataLength})`;
  }
  return f;
}

export interface TargetColumn {
  source: string;
  target: string;
  logical: LogicalType; // what is staged (after the column's declared policy)
  policy?: ColumnPolicy | null;
  bind?: OracleBindKind; // absent: 'string'
  dataType: string;
  // From ALL_TAB_COLUMNS, to name the column a data error is about (unknown: null).
  precision: number | null;
  scale: number | null;
  dataLength: number | null; // bytes
  charLength: number | null; // characters, when charUsed is 'C'
  charUsed: string | null;
  nullable: boolean;
}
