// Declared value policies (docs/transfer.md, "Value policies"): the conversions a user accepts for a column, declared
// in its mapping (config.ts). They are applied here, once, to the canonical rows of the source, and the result is
// what both checksums cover: the source's manifest is computed from the converted rows, the target stages those rows
// and checksums what it stored. So verification stays exact: the target must hold the converted value unchanged.
// Without a declared policy nothing is converted, and a value the target cannot hold unchanged is refused.
import {
  ChecksumAccumulator,
  canonicalDecimal,
  canonicalFloat,
  type CanonicalRow,
  type LogicalType,
} from './checksum.js';
import type { TransferConfig } from './config.js';
import { TransferError } from './errors.js';
import type { Manifest, SchemaColumn, SourceAdapter, SourceSchema, StreamFacts, Window } from './types.js';

export type ColumnPolicy =
  | { kind: 'empty_to_null' }
  | { kind: 'float_double' }
  | { kind: 'float_decimal'; precision: number; scale: number }
  | { kind: 'datetime_seconds' };

type ColumnConfig = TransferConfig['columns'][number];

export function columnPolicy(c: ColumnConfig): ColumnPolicy | null {
  if (c.empty === 'null') return { kind: 'empty_to_null' };
  if (c.float === 'double') return { kind: 'float_double' };
  if (typeof c.float === 'object')
    return { kind: 'float_decimal', precision: c.float.decimal[0], scale: c.float.decimal[1] };
  if (c.datetime === 'seconds') return { kind: 'datetime_seconds' };
  return null;
}

export function hasValuePolicies(t: TransferConfig): boolean {
  return t.columns.some((c) => columnPolicy(c) !== null);
}

// The logical type of what is staged and checksummed for a source column of `logical` under `policy`.
export function stagedLogical(logical: LogicalType, policy: ColumnPolicy | null): LogicalType {
  return policy?.kind === 'float_decimal' ? 'decimal' : logical;
}

const APPLIES_TO: Record<ColumnPolicy['kind'], { types: readonly LogicalType[]; field: string; what: string }> = {
  empty_to_null: { types: ['text', 'bytes'], field: 'empty', what: 'text and binary columns' },
  float_double: { types: ['float'], field: 'float', what: 'float and real columns' },
  float_decimal: { types: ['float'], field: 'float', what: 'float and real columns' },
  datetime_seconds: { types: ['timestamp'], field: 'datetime', what: 'date-time columns without a time zone' },
};

// Checks each mapped column's declared policy against its source type (when the schema is read): a float column
// needs one, a policy must fit its column. Terminal errors naming the transfer and the column.
export function checkPolicies(t: TransferConfig, columns: readonly SchemaColumn[]): void {
  for (const c of t.columns) {
    const col = columns.find((s) => s.name === c.source);
    if (!col) continue;
    const policy = columnPolicy(c);
    if (col.logical === 'float' && policy === null)
      throw new TransferError(
        'unsupported_type',
        `transfer ${t.name}: source column ${c.source} has type ${col.type}, a binary floating point type with no exact decimal form; declare how to convert it in its mapping: "float": "double" (kept exact, into BINARY_DOUBLE or double precision) or "float": {"decimal": [p, s]} (rounded to s digits)`,
        { column: c.source },
      );
    if (policy && !APPLIES_TO[policy.kind].types.includes(col.logical)) {
      const a = APPLIES_TO[policy.kind];
      throw new TransferError(
        'unsupported_type',
        `transfer ${t.name}: column ${c.source} declares "${a.field}", which applies to ${a.what}; ${c.source} has type ${col.type}`,
        { column: c.source },
      );
    }
  }
}

// Rounds canonical decimal text half away from zero to `scale` fraction digits (exact, on the digits).
export function roundDecimal(text: string, scale: number): string {
  const neg = text.startsWith('-');
  const [int, frac = ''] = (neg ? text.slice(1) : text).split('.');
  if (frac.length <= scale) return text;
  const digits = `${int}${frac.slice(0, scale)}`;
  let rounded = BigInt(digits);
  if (frac.charCodeAt(scale) >= 53) rounded += 1n; // next digit >= '5'
  const s = rounded.toString().padStart(scale + 1, '0');
  const body = scale === 0 ? s : `${s.slice(0, s.length - scale)}.${s.slice(s.length - scale)}`;
  return canonicalDecimal(`${neg ? '-' : ''}${body}`);
}

// A row converter for the mapped columns of `schema`, or null when no column has a policy.
export function policyConverter(t: TransferConfig, schema: SourceSchema): ((row: CanonicalRow) => CanonicalRow) | null {
  if (!hasValuePolicies(t)) return null;
  const keyIdx = t.keyColumns.map((k) => t.columns.findIndex((c) => c.source === k));
  const keyOf = (row: CanonicalRow) => t.keyColumns.map((k, i) => `${k}=${row[keyIdx[i]!] ?? 'NULL'}`).join(', ');
  const refuse = (row: CanonicalRow, column: string, message: string): never => {
    throw new TransferError(
      'unsupported_type',
      `transfer ${t.name}: column ${column}, row with key ${keyOf(row)}: ${message}. The same value is refused on every retry; change the policy or the source value`,
      { column, key: keyOf(row) },
    );
  };
  const convert: ((v: string, row: CanonicalRow) => string | null)[] = [];
  const active: number[] = [];
  t.columns.forEach((c, i) => {
    const policy = columnPolicy(c);
    if (!policy) return;
    const col = schema.columns.find((s) => s.name === c.source);
    if (!col) throw new TransferError('schema_drift', `transfer ${t.name}: column ${c.source} is not in the schema`);
    active.push(i);
    switch (policy.kind) {
      case 'empty_to_null':
        convert[i] = (v) => (v === '' ? null : v);
        break;
      case 'datetime_seconds':
        // canonical timestamp YYYY-MM-DDTHH:MM:SS.ffffff: the fraction is cut, not rounded
        convert[i] = (v) => `${v.slice(0, 19)}.000000`;
        break;
      case 'float_double':
        convert[i] = (v, row) => {
          try {
            return canonicalFloat(v);
          } catch (err) {
            return refuse(row, c.source, `${(err as Error).message}, which no target column holds`);
          }
        };
        break;
      case 'float_decimal': {
        const { precision, scale } = policy;
        convert[i] = (v, row) => {
          let exact: string;
          try {
            exact = canonicalFloat(v);
          } catch (err) {
            return refuse(
              row,
              c.source,
              `${(err as Error).message}, which decimal(${precision}, ${scale}) cannot hold`,
            );
          }
          const r = roundDecimal(exact, scale);
          const intDigits = r.replace(/^-/, '').split('.')[0]!.replace(/^0+/, '').length;
          if (intDigits > precision - scale)
            refuse(
              row,
              c.source,
              `${exact} has ${intDigits} integer digits, more than decimal(${precision}, ${scale}) holds`,
            );
          return r;
        };
        break;
      }
    }
  });
  return (row) => {
    const out = row.slice();
    for (const i of active) {
      const v = out[i];
      if (v !== null && v !== undefined) out[i] = convert[i]!(v, row);
    }
    return out;
  };
}

// The source as the service sees it when the transfer declares value policies: rows converted by policyConverter,
// the manifest computed from those rows (keel-v1, in TypeScript, whatever the engine computes natively), and no
// bulk stream (it would carry unconverted values). Without policies the source itself.
export function withValuePolicies(t: TransferConfig, source: SourceAdapter): SourceAdapter {
  if (!hasValuePolicies(t)) return source;
  const rows = async function* (w: Window, schema: SourceSchema, chunkSize: number, facts?: StreamFacts) {
    const convert = policyConverter(t, schema)!;
    for await (const chunk of source.streamRows(w, schema, chunkSize, facts)) yield chunk.map(convert);
  };
  return {
    engine: source.engine,
    readSchema: () => source.readSchema(),
    nextWindow: (low, maxRows, opts) => source.nextWindow(low, maxRows, opts),
    ...(source.windowsBaselines ? { windowsBaselines: true } : {}),
    checksumAlgorithms: async () => ['keel-v1'],
    async manifest(w, schema, algorithm): Promise<Manifest> {
      if (algorithm !== 'keel-v1')
        throw new Error(`transfer ${t.name} declares value policies: its manifest is keel-v1, not ${algorithm}`);
      const acc = new ChecksumAccumulator();
      for await (const chunk of rows(w, schema, 5000)) for (const row of chunk) acc.add(row);
      return { rowCount: acc.count, checksum: acc.checksum };
    },
    streamRows: rows,
    // Key columns take no policy (config.ts), so the source's own keys are the converted rows' keys.
    ...(source.windowKeys ? { windowKeys: source.windowKeys.bind(source) } : {}),
    ...(source.rowsAfter ? { rowsAfter: source.rowsAfter.bind(source) } : {}),
    // The conversion is a function of each row alone: a snapshot read stays one after it.
    ...(source.readsSnapshot ? { readsSnapshot: source.readsSnapshot.bind(source) } : {}),
    close: () => source.close(),
  };
}
