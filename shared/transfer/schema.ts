// The recorded source schema: the columns a transfer reads (mapped columns in mapping order, then the boundary
// column when it is not mapped), with their declared types; its hash identifies it in the journal.
import { createHash } from 'node:crypto';
import type { LogicalType } from './checksum.js';
import type { TransferConfig } from './config.js';
import { TransferError } from './errors.js';
import type { SchemaColumn, SourceSchema } from './types.js';

export function relevantSourceColumns(t: TransferConfig): string[] {
  const cols = t.columns.map((c) => c.source);
  if (!cols.includes(t.boundary.column)) cols.push(t.boundary.column);
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
    columns.push({ name, type: declared, logical: logical ?? 'bytes' });
  }
  return { columns, hash: hashSchema(columns) };
}

// The mapped columns only (what is staged and checksummed), in mapping order.
export function mappedColumns(
  t: TransferConfig,
  schema: SourceSchema,
): { source: string; target: string; logical: LogicalType; type: string }[] {
  return t.columns.map((c) => {
    const col = schema.columns.find((s) => s.name === c.source);
    if (!col)
      throw new TransferError(
        'schema_drift',
        `transfer ${t.name}: source column ${c.source} is missing from the recorded schema`,
      );
    return { source: c.source, target: c.target, logical: col.logical, type: col.type };
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
