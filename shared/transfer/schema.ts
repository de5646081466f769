// The recorded source schema: the columns a transfer reads (mapped columns in mapping order, then the boundary
// column when it is not mapped), with their declared types; its hash identifies it in the journal.
import { createHash } from 'node:crypto';
import type { LogicalType } from './checksum.js';
import type { TransferConfig } from './config.js';
import { TransferError } from './errors.js';
import { checkPolicies, columnPolicy, stagedLogical, type ColumnPolicy } from './policies.js';
import type { SchemaColumn, SourceSchema, TypeFacets } from './types.js';

export function relevantSourceColumns(t: TransferConfig): string[] {
  const cols = t.columns.map((c) => c.source);
  if (t.boundary.column !== undefined && !cols.includes(t.boundary.column)) cols.push(t.boundary.column);
  return cols;
}

export function hashSchema(columns: SchemaColumn[]): string {
  const canonical = JSON.stringify(columns.map((c) => [c.name, c.type.toLowerCase(), c.logical]));
  return createHash('sha256').update(canonical).digest('hex');
}

// Builds the recorded schema from what the source reports (name -> declared type), checking that every
// configured column exists and has a supported type.
export function buildSourceSchema(
  t: TransferConfig,
  found: Map<string, string>,
  toLogical: (declared: string) => LogicalType | null,
  boundaryTypeOk: (declared: string, logical: LogicalType | null) => boolean,
  // The engine's reading of a declared type's bounds, and which columns may be NULL (absent: not known).
  facets?: (declared: string, logical: LogicalType, name: string) => TypeFacets,
  nullable?: Map<string, boolean>,
): SourceSchema {
  const columns: SchemaColumn[] = [];
  for (const name of relevantSourceColumns(t)) {
    const declared = found.get(name);
    if (declared === undefined) {
      throw new TransferError(
        'schema_drift',
        `transfer ${t.name}: source column ${name} does not exist in ${t.source.table ?? 'the source query'}`,
        { column: name },
      );
    }
    const logical = toLogical(declared);
    const isBoundaryOnly = name === t.boundary.column && !t.columns.some((c) => c.source === name);
    if (name === t.boundary.column && !boundaryTypeOk(declared, logical)) {
      throw new TransferError(
        'unsupported_type',
        `transfer ${t.name}: boundary column ${name} has type ${declared}, which a ${t.boundary.kind} window cannot use`,
        { column: name },
      );
    }
    if (logical === null && !isBoundaryOnly) {
      throw new TransferError(
        'unsupported_type',
        `transfer ${t.name}: source column ${name} has type ${declared}, which transfers do not support`,
        { column: name },
      );
    }
    const col: SchemaColumn = { name, type: declared, logical: logical ?? 'bytes' };
    if (t.keyColumns.includes(name)) col.key = true;
    if (name === t.boundary.column) col.boundary = true;
    const n = nullable?.get(name);
    if (n !== undefined) col.nullable = n;
    if (facets && logical !== null) col.facets = facets(declared, logical, name);
    columns.push(col);
  }
  checkPolicies(t, columns);
  return { columns, hash: hashSchema(columns) };
}

// The key columns a batch's recorded schema was read with, in schema order (null: not recorded).
export function recordedKeyColumns(columns: readonly SchemaColumn[]): string[] | null {
  const keys = columns.filter((c) => c.key === true).map((c) => c.name);
  return keys.length > 0 ? keys : null;
}

// Whether a recorded schema carries the flags (key, boundary): every schema read since they were recorded flags at
// least one key column. Without them (a batch journalled before, by an older version) they are not known.
export function schemaFlagged(columns: readonly SchemaColumn[]): boolean {
  return columns.some((c) => c.key === true);
}

// Whether a batch may have been recorded under other key columns than keyColumns: the stage refused NULL and
// repeated keys under the key columns of its time only. A batch journalled before they were recorded (no flags)
// may have been: not known, so it is asked like a changed one (its staged keys read once before the apply,
// StagingTarget.apply) -- answered false, a NULL part of a new key merged silently as a row of its own.
export function keysChangedSince(columns: readonly SchemaColumn[], keyColumns: readonly string[]): boolean {
  const recorded = recordedKeyColumns(columns);
  if (recorded === null) return columns.length > 0;
  return recorded.length !== keyColumns.length || !keyColumns.every((k) => recorded.includes(k));
}

// When a column window's recorded schema says its bounds are values of another column than boundary.column: that
// column (or '' when the record names none but does not hold boundary.column at all, so it was another one); null
// when the same column, or not known. Not for change windows (no column). A record journalled before the flags
// (schemaFlagged false) is read by the order it was built in (relevantSourceColumns: the mapped columns, then the
// boundary column when it was not mapped): its last column, when no column maps it now and it is not boundary.column,
// was an unmapped boundary column (derived, boundaryDerivation says so in messages). A mapped boundary column is not
// told apart from the other mapped ones there: taken as unchanged.
export function boundaryColumnChanged(columns: readonly SchemaColumn[], t: TransferConfig): string | null {
  const current = t.boundary.column;
  if (current === undefined) return null;
  const recorded = columns.find((c) => c.boundary === true)?.name;
  if (recorded !== undefined) return recorded === current ? null : recorded;
  if (schemaFlagged(columns) || columns.length === 0) return null;
  if (!columns.some((c) => c.name === current)) return '';
  const last = columns[columns.length - 1]!.name;
  return last !== current && !t.columns.some((c) => c.source === last) ? last : null;
}

// For a message about boundaryColumnChanged's answer on an unflagged record: how it was found, and what to do when
// the derivation is wrong (its last column was a mapped one, dropped from the mapping since).
export function boundaryDerivation(batchId: string, columns: readonly SchemaColumn[]): string {
  if (schemaFlagged(columns)) return '';
  return ` (batch ${batchId} was journalled before the boundary column was recorded: read from its recorded schema, whose last column is not mapped now; if that column was mapped then and dropped from the mapping since, map it again until one batch has committed -- it records the boundary column -- then drop it)`;
}

// A mapped column: logical is the source's type (what the source reads), staged what travels after the column's
// declared policy (what the target stores and both checksums cover).
export interface MappedColumn {
  source: string;
  target: string;
  logical: LogicalType;
  type: string;
  staged: LogicalType;
  policy: ColumnPolicy | null;
  nullable: boolean | undefined;
  facets: TypeFacets | undefined;
}

// The mapped columns only (what is staged and checksummed), in mapping order.
export function mappedColumns(t: TransferConfig, schema: SourceSchema): MappedColumn[] {
  return t.columns.map((c) => {
    const col = schema.columns.find((s) => s.name === c.source);
    if (!col)
      throw new TransferError(
        'schema_drift',
        `transfer ${t.name}: source column ${c.source} is missing from the recorded schema`,
      );
    const policy = columnPolicy(c);
    return {
      source: c.source,
      target: c.target,
      logical: col.logical,
      type: col.type,
      staged: stagedLogical(col.logical, policy),
      policy,
      nullable: col.nullable,
      facets: col.facets,
    };
  });
}

export function describeSchemaDiff(recorded: SchemaColumn[], current: SchemaColumn[]): string {
  const diffs: string[] = [];
  const cur = new Map(current.map((c) => [c.name, c]));
  const rec = new Map(recorded.map((c) => [c.name, c]));
  for (const r of recorded) {
    const c = cur.get(r.name);
    if (!c) diffs.push(`${r.name} removed`);
    else if (c.type.toLowerCase() !== r.type.toLowerCase()) diffs.push(`${r.name}: ${r.type} -> ${c.type}`);
  }
  for (const c of current) if (!rec.has(c.name)) diffs.push(`${c.name} added`);
  return diffs.length ? diffs.join(', ') : 'column order or type mapping changed';
}

// What a target column can hold, as the target engine reads it from its catalog (absent/null: unbounded or not
// known, not checked).
export interface TargetColumnFacets {
  declared: string; // for messages, e.g. "VARCHAR2(10 BYTE)", "numeric(12,2)"
  nullable: boolean;
  maxChars?: number | null;
  maxBytes?: number | null;
  fixed?: boolean; // blank-padded to maxChars (Oracle CHAR/NCHAR, PostgreSQL character(n))
  intBits?: number; // PostgreSQL smallint/integer/bigint
  precision?: number | null; // decimal digits in all (Oracle NUMBER(P[,S]), PostgreSQL numeric(P,S))
  scale?: number | null;
  fraction?: number; // fraction-of-second digits the column keeps
}

const INT_DIGITS: Record<number, number> = { 8: 3, 16: 5, 32: 10, 64: 19 };

// prepare's check of one mapped column against its target column, before anything is staged: lengths, precision and
// scale, fraction digits and nullability of what the source (after the column's policy) can hold. A value that
// would fail (or be cut or rounded) in the target is refused here, naming the column, instead of at staging.
export function checkColumnFits(t: TransferConfig, m: MappedColumn, target: TargetColumnFacets): void {
  const src = { ...(m.facets ?? {}) };
  const policy = m.policy?.kind;
  if (m.policy?.kind === 'float_decimal') Object.assign(src, { precision: m.policy.precision, scale: m.policy.scale });
  if (policy === 'datetime_seconds') src.fraction = 0;
  const refuse = (why: string): never => {
    throw new TransferError(
      'target_incompatible',
      `transfer ${t.name}: target column ${m.target} (${target.declared}) cannot hold every value of source column ${m.source} (${m.type}): ${why}`,
      { column: m.source },
    );
  };
  if (!target.nullable && (m.nullable === true || policy === 'empty_to_null'))
    refuse(
      policy === 'empty_to_null'
        ? 'the column is NOT NULL and the declared "empty": "null" turns an empty value into NULL'
        : 'the column is NOT NULL and the source column allows NULL',
    );
  switch (m.staged) {
    case 'text':
      if (target.fixed) {
        // Fixed width pads to its length: only a source padded to the same length reads back as it was sent (F9).
        if (m.facets !== undefined && !(m.facets.fixed && m.facets.maxChars === target.maxChars))
          refuse(
            `a fixed-width column pads values to ${target.maxChars ?? '?'} characters, so only a fixed-width source of the same length reads back unchanged; map it to a variable-width column (VARCHAR2, varchar)`,
          );
        return;
      }
      if (
        target.maxChars != null &&
        src.maxChars !== undefined &&
        (src.maxChars === null || src.maxChars > target.maxChars)
      )
        refuse(`the source allows ${src.maxChars ?? 'unbounded'} characters, the target ${target.maxChars}`);
      if (
        target.maxBytes != null &&
        src.maxBytes !== undefined &&
        (src.maxBytes === null || src.maxBytes > target.maxBytes)
      )
        refuse(
          `the source allows ${src.maxBytes ?? 'unbounded'} bytes of UTF-8, the target ${target.maxBytes} bytes (with character length semantics, e.g. VARCHAR2(n CHAR), it counts characters)`,
        );
      return;
    case 'int':
      if (src.intBits === undefined) return;
      if (target.intBits !== undefined && src.intBits > target.intBits)
        refuse(`a ${src.intBits}-bit integer does not fit a ${target.intBits}-bit one`);
      if (target.precision != null && INT_DIGITS[src.intBits]! > target.precision)
        refuse(`a ${src.intBits}-bit integer has up to ${INT_DIGITS[src.intBits]} digits`);
      return;
    case 'decimal':
      if (target.precision == null || src.precision === undefined) return;
      if (src.precision == null) refuse('the source decimal is unconstrained');
      if ((target.scale ?? 0) < (src.scale ?? 0))
        refuse(`${src.scale} digits after the point would be rounded to ${target.scale ?? 0}`);
      if (target.precision - (target.scale ?? 0) < src.precision! - (src.scale ?? 0))
        refuse(
          `up to ${src.precision! - (src.scale ?? 0)} digits before the point, the target ${target.precision - (target.scale ?? 0)}`,
        );
      return;
    case 'timestamp':
    case 'timestamptz':
      if (target.fraction !== undefined && src.fraction !== undefined && Math.min(6, src.fraction) > target.fraction)
        refuse(
          `${Math.min(6, src.fraction)} fraction digits would be rounded to ${target.fraction}${m.staged === 'timestamp' ? ' (declare "datetime": "seconds" to cut them, for an Oracle DATE)' : ''}`,
        );
      return;
    case 'bytes':
      if (
        target.maxBytes != null &&
        src.maxBytes !== undefined &&
        (src.maxBytes === null || src.maxBytes > target.maxBytes)
      )
        refuse(`the source allows ${src.maxBytes ?? 'unbounded'} bytes, the target ${target.maxBytes}`);
      return;
    default:
      return;
  }
}
