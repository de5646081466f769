// The Oracle side of the typed target procedure table (shared/transfer/targetProcedures.ts): the KEEL_TRANSFER
// package's members and parameters, the call statement and binds, and the package's application errors as faults.
import oracledb from 'oracledb';
import type { TargetFault } from '../../transfer/stagingTarget.js';
import {
  assertTargetArgs,
  type TargetArgs,
  type TargetParam,
  type TargetProcedure,
  type TargetRow,
  type TargetValue,
} from '../../transfer/targetProcedures.js';
import type { OracleSession } from './session.js';

// Application error numbers raised by sql/oracle/V001 (RAISE_APPLICATION_ERROR), read from err.errorNum.
const ORA_CONFLICT = 20001;
const ORA_NOT_STAGED = 20002;
const ORA_MERGE_COUNT = 20003;
const ORA_STAGING_SHAPE = 20004;
const ORA_FENCED = 20005;

// The Oracle side of TARGET_PROCEDURES: each package member with its parameters as sql/oracle declares them (name and
// type, in declaration order: the IN parameters of the contract, then the OUT parameters), and for a function its
// return value. A value is bound by its declared type: a name list as comma-separated VARCHAR2, a flag as NUMBER
// 1/0; `value` converts what the engine takes in another unit or case. test/engines/parity.test.ts compares this
// table with the package specification in sql/oracle/R__010_keel_transfer_package.sql.
export type OracleParamType = 'VARCHAR2' | 'NUMBER';
export interface OracleParam {
  name: string;
  type: OracleParamType;
  value?: (v: TargetValue) => string | number | null;
}
export interface OracleOut {
  name: string;
  type: OracleParamType;
  maxSize?: number; // VARCHAR2: the longest value
  result?: string; // the contract's result this answers (absent: bound, not read)
}
export interface OracleProcedure<P extends TargetProcedure> {
  member: string; // KEEL_TRANSFER.<member>
  params: { [K in TargetParam<P>]: OracleParam };
  outs: OracleOut[];
  returns?: OracleOut; // a FUNCTION's return value
}

export const waitSeconds = (waitMs: number) => Math.max(1, Math.ceil(waitMs / 1000));
const varchar = (name: string): OracleParam => ({ name, type: 'VARCHAR2' });
const number = (name: string): OracleParam => ({ name, type: 'NUMBER' });

// The completion row's outcome, count and checksum, as APPLY_BATCH and TRY_CLAIM answer them.
const COMPLETION_OUTS: OracleOut[] = [
  { name: 'o_outcome', type: 'VARCHAR2', maxSize: 20, result: 'outcome' },
  { name: 'o_row_count', type: 'NUMBER', result: 'row_count' },
  { name: 'o_checksum', type: 'VARCHAR2', maxSize: 24, result: 'checksum' },
];

export const TARGET_ORACLE_PROCEDURES: { [P in TargetProcedure]: OracleProcedure<P> } = {
  ensure_staging: {
    member: 'ENSURE_STAGING',
    params: {
      transfer: varchar('p_transfer'),
      target_schema: varchar('p_owner'),
      target_table: varchar('p_table'),
      columns: varchar('p_columns'),
      ops: number('p_ops'),
    },
    outs: [{ name: 'o_staging', type: 'VARCHAR2', maxSize: 128 }],
  },
  begin_stage: {
    member: 'BEGIN_STAGE',
    params: {
      batch_id: varchar('p_batch_id'),
      transfer: varchar('p_transfer'),
      expected_count: number('p_expected_count'),
      expected_checksum: varchar('p_expected_checksum'),
    },
    outs: [],
    returns: { name: 'o_result', type: 'VARCHAR2', maxSize: 20, result: 'opened' },
  },
  finish_stage: {
    member: 'FINISH_STAGE',
    params: { batch_id: varchar('p_batch_id'), count: number('p_count'), checksum: varchar('p_checksum') },
    outs: [],
  },
  apply_batch: {
    member: 'APPLY_BATCH',
    params: {
      batch_id: varchar('p_batch_id'),
      transfer: varchar('p_transfer'),
      target_schema: varchar('p_owner'),
      target_table: varchar('p_table'),
      staging_table: varchar('p_staging'),
      columns: varchar('p_columns'),
      keys: varchar('p_keys'),
      expected_count: number('p_expected_count'),
      expected_checksum: varchar('p_expected_checksum'),
      attempt: number('p_attempt'),
      // 'OPS' | 'MIRROR': deletes, same transaction
      changes: { ...varchar('p_changes'), value: (v) => (v === null ? null : String(v).toUpperCase()) },
      // a windowed baseline's key window: the MIRROR deletes only target rows whose first key column (a NUMBER) is in
      // (mirror_low, mirror_high] (the dialect's mirrorsKeyRanges, transferTarget.ts)
      mirror_low: varchar('p_mirror_low'),
      mirror_high: varchar('p_mirror_high'),
    },
    outs: [...COMPLETION_OUTS, { name: 'o_deleted', type: 'NUMBER', result: 'deleted_count' }],
  },
  try_claim: {
    member: 'TRY_CLAIM',
    params: {
      batch_id: varchar('p_batch_id'),
      wait_ms: { ...number('p_wait_seconds'), value: (v) => waitSeconds(Number(v)) },
      fence_through: number('p_fence_through'),
    },
    outs: [...COMPLETION_OUTS, { name: 'o_staged', type: 'NUMBER', result: 'staged' }],
  },
  purge_staged: {
    member: 'PURGE_STAGED',
    params: { batch_id: varchar('p_batch_id'), staging_table: varchar('p_staging') },
    outs: [],
  },
  staged_batches: {
    member: 'STAGED_BATCHES',
    params: { transfer: varchar('p_transfer'), max_count: number('p_max_count'), after: varchar('p_after') },
    outs: [{ name: 'o_batch_ids', type: 'VARCHAR2', maxSize: 4000, result: 'batch_ids' }],
  },
};

function oracleValue(p: OracleParam, v: TargetValue): string | number | null {
  if (p.value) return p.value(v);
  if (Array.isArray(v)) return v.join(',');
  if (typeof v === 'boolean') return v ? 1 : 0;
  return v as string | number | null;
}

const outBind = (o: OracleOut) => ({
  dir: oracledb.BIND_OUT,
  type: o.type === 'NUMBER' ? oracledb.NUMBER : oracledb.STRING,
  ...(o.maxSize !== undefined ? { maxSize: o.maxSize } : {}),
});

// The anonymous block and binds of one call: named notation (p_x => :p_x), so the server itself refuses a parameter
// the table misnames; every value a bind.
export function oracleStatement<P extends TargetProcedure>(
  proc: P,
  args: TargetArgs<P>,
): { sql: string; binds: Record<string, oracledb.BindParameter | string | number | null> } {
  assertTargetArgs(proc, args);
  const p = TARGET_ORACLE_PROCEDURES[proc] as OracleProcedure<TargetProcedure>;
  const params = Object.entries(p.params) as [string, OracleParam][];
  const binds: Record<string, oracledb.BindParameter | string | number | null> = {};
  for (const [name, param] of params)
    binds[param.name] = oracleValue(param, (args as Record<string, TargetValue>)[name]!);
  for (const o of p.outs) binds[o.name] = outBind(o);
  if (p.returns) binds[p.returns.name] = outBind(p.returns);
  const list = [...params.map(([, q]) => q.name), ...p.outs.map((o) => o.name)].map((n) => `${n} => :${n}`);
  const assign = p.returns ? `:${p.returns.name} := ` : '';
  return { sql: `BEGIN ${assign}KEEL_TRANSFER.${p.member}(${list.join(', ')}); END;`, binds };
}

// Runs one call on the session and answers its results by the contract's names.
export async function oracleCall<P extends TargetProcedure>(
  s: OracleSession,
  proc: P,
  args: TargetArgs<P>,
  options: oracledb.ExecuteOptions = {},
): Promise<TargetRow<P>> {
  const p = TARGET_ORACLE_PROCEDURES[proc] as OracleProcedure<TargetProcedure>;
  const { sql, binds } = oracleStatement(proc, args);
  const r = await s.run(p.member, (c) => c.execute(sql, binds, options));
  const out = (r.outBinds ?? {}) as Record<string, unknown>;
  const row: Record<string, unknown> = {};
  for (const o of [...p.outs, ...(p.returns ? [p.returns] : [])]) if (o.result) row[o.result] = out[o.name];
  return row as TargetRow<P>;
}

// Application error numbers raised by sql/oracle (RAISE_APPLICATION_ERROR), read from err.errorNum.
export const ORA_FAULTS: ReadonlyMap<number, TargetFault> = new Map([
  [ORA_CONFLICT, 'conflict'],
  [ORA_NOT_STAGED, 'not_staged'],
  [ORA_MERGE_COUNT, 'merge_count'],
  [ORA_STAGING_SHAPE, 'staging_shape'],
  [ORA_FENCED, 'fenced'],
]);
