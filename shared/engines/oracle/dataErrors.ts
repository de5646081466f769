// Oracle error numbers, and a data error a value of the batch causes explained as the terminal 'unsupported_type'
// with its column and row key (docs/oracle.md, "Data types").
import type { CanonicalRow } from '../../transfer/checksum.js';
import { TransferError } from '../../transfer/errors.js';
import type { TargetColumn } from './canonical.js';

// err.errorNum, or the ORA-nnnnn at the start of the message: thin mode's executeMany batch errors carry only the
// message (and the row in `offset`).
export function oraNum(err: unknown): number | undefined {
  const n = (err as { errorNum?: unknown } | null)?.errorNum;
  if (typeof n === 'number') return n;
  const m = /^ORA-(\d{5})/.exec(String((err as { message?: unknown } | null)?.message ?? ''));
  return m ? Number(m[1]) : undefined;
}

// Oracle errors a value of the batch causes, and causes again on every retry (the source window is re-read and
// holds the same value): the batch is refused as a whole with the terminal 'unsupported_type', naming the column
// and the row's key, instead of being staged again and again (docs/oracle.md, "Data types").
export const ORA_DATA_ERRORS: ReadonlyMap<number, string> = new Map([
  [1400, 'NULL into a NOT NULL column'],
  [1407, 'NULL into a NOT NULL column'],
  [1401, 'value too large for the column'],
  [12899, 'value too large for the column (NLS_LENGTH_SEMANTICS BYTE counts bytes, not characters)'],
  [1438, "value larger than the column's precision"],
  [1426, 'numeric overflow'],
  [1722, 'not a number (e.g. NaN)'],
  [1461, 'value over the bind limit (4,000 bytes, 32,767 with MAX_STRING_SIZE = EXTENDED; hex doubles binary)'],
  [997, 'value over the bind limit (4,000 bytes, 32,767 with MAX_STRING_SIZE = EXTENDED; hex doubles binary)'],
  [1839, 'date not valid for the month (or inside the 1582 Julian-Gregorian gap)'],
  [1841, 'year outside -4713..9999'],
  [1847, 'day of month out of range'],
  [1843, 'not a valid month'],
  [1850, 'hour out of range'],
  [1851, 'minute out of range'],
  [1852, 'second out of range'],
  [1858, 'non-numeric character in a date'],
  [1861, 'literal does not match the date format'],
  [1830, 'date format ends before the input'],
  [2290, 'check constraint violated'],
]);

// Whether a value explains a data error in its column, from what ALL_TAB_COLUMNS says the column holds.
function explains(errorNum: number, c: TargetColumn, v: string | null): boolean {
  switch (errorNum) {
    case 1400:
    case 1407:
      return v === null && !c.nullable;
    case 12899:
    case 1401:
      if (v === null || c.logical !== 'text') return false;
      return c.charUsed === 'C' && c.charLength
        ? [...v].length > c.charLength
        : c.dataLength !== null && Buffer.byteLength(v, 'utf8') > c.dataLength;
    case 1438:
    case 1426: {
      if (v === null || (c.logical !== 'int' && c.logical !== 'decimal')) return false;
      if (c.precision === null) return false;
      const digits = v.replace(/^-/, '').split('.')[0]!.replace(/^0+/, '').length;
      return digits > c.precision - (c.scale ?? 0);
    }
    case 1722:
      return v !== null && (c.logical === 'int' || c.logical === 'decimal') && !/^-?\d+(\.\d+)?(e[-+]?\d+)?$/i.test(v);
    case 1461:
    case 997:
      return v !== null && Buffer.byteLength(v, 'utf8') > 4000;
    case 2290:
      return false;
    default: {
      // date and time conversions: not a date, year 0 (or BC), or a day inside the 1582 Julian-Gregorian gap
      if (v === null || !['date', 'timestamp', 'timestamptz'].includes(c.logical)) return false;
      const m = /^(\d{4})-(\d{2})-(\d{2})/.exec(v);
      return !m || m[1] === '0000' || (m[1] === '1582' && m[2] === '10' && Number(m[3]) >= 5 && Number(m[3]) <= 14);
    }
  }
}

// A deterministic data error (ORA_DATA_ERRORS) as the terminal 'unsupported_type', with the column and the row's
// key where they can be told (rowOffset: the row of `rows` that failed, from executeMany's batch errors; null:
// look for the first row a value of which explains the error). Anything else: null (the caller rethrows it).
export function dataError(
  batchId: string,
  err: unknown,
  rowOffset: number | null,
  rows: readonly CanonicalRow[],
  cols: TargetColumn[],
  keyColumns: readonly string[],
): TransferError | null {
  const num = oraNum(err);
  const what = num === undefined ? undefined : ORA_DATA_ERRORS.get(num);
  if (num === undefined || what === undefined) return null;
  const message = String((err as { message?: unknown }).message ?? err);
  // Oracle names the column in ORA-12899, ORA-01400 and ORA-01407 ("OWNER"."TABLE"."COL"); otherwise the first value
  // that explains the error names it.
  const quoted = [...message.matchAll(/"([^"]+)"/g)].map((m) => m[1]);
  const named = quoted.length > 0 ? cols.findIndex((c) => c.target === quoted.at(-1)) : -1;
  const culprit = (r: CanonicalRow): number =>
    named >= 0
      ? explains(num, cols[named]!, r[named] ?? null)
        ? named
        : -1
      : cols.findIndex((c, i) => explains(num, c, r[i] ?? null));
  let row = rowOffset !== null ? (rows[rowOffset] ?? null) : null;
  let col = row ? culprit(row) : -1;
  if (!row) {
    for (const r of rows) {
      col = culprit(r);
      if (col >= 0) {
        row = r;
        break;
      }
    }
  }
  if (col < 0) col = named;
  const column = col >= 0 ? cols[col]!.source : null;
  const key = row
    ? keyColumns
        .map((k) => {
          const i = cols.findIndex((c) => c.source === k);
          return `${k}=${i >= 0 ? (row[i] ?? 'NULL') : '?'}`;
        })
        .join(', ')
    : null;
  const where = [
    column ? `column ${column} (${cols[col]!.target})` : 'a column Oracle did not name',
    key ? `row with key ${key}` : 'a row Oracle did not name',
  ].join(', ');
  return new TransferError(
    'unsupported_type',
    `batch ${batchId}: ORA-${String(num).padStart(5, '0')} (${what}) at ${where}: ${message.split('\n')[0]}. The same value fails on every retry, so the batch is refused; change the target column or the source value`,
    { errorNum: num, column, key },
  );
}
