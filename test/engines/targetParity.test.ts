// Engine parity of the transfer targets, compared as data (the targets' sibling of parity.test.ts).
// TARGET_PROCEDURES (shared/transfer/targetProcedures.ts) names every target procedure, its parameters and its
// results; each engine calls through its own typed table derived from it (TARGET_POSTGRES_FUNCTIONS,
// TARGET_ORACLE_PROCEDURES). This test compares those tables with what the engines really declare: the
// keel_transfer functions of a migrated PostgreSQL target, read from its catalog, and the KEEL_TRANSFER package
// specification in sql/oracle (parsed, as no Oracle runs here).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  TARGET_PROCEDURES,
  toReconcileOutcome,
  tryClaimArgs,
  type TargetProcedure,
} from '../../shared/transfer/targetProcedures.js';
import { TARGET_POSTGRES_FUNCTIONS, targetStatement } from '../../shared/engines/postgres/transferTarget.js';
import {
  oracleStatement,
  TARGET_ORACLE_PROCEDURES,
  type OracleProcedure,
} from '../../shared/engines/oracle/targetProcedures.js';
import { migratePostgresTarget } from '../../shared/engines/postgres/transferEndpoints.js';
import { poolErrorLogger } from '../../shared/engines/poolErrors.js';
import type { PgSignature } from '../../shared/engines/postgres/procedures.js';
import { createTestDatabase } from '../support/pg.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const PROCS = Object.keys(TARGET_PROCEDURES) as TargetProcedure[];
// keel_transfer functions the procedures use themselves, never called by a target.
// Outside the shared contract: two helpers (a name's quoting, the claim every apply makes), and the PostgreSQL-only direct apply's two functions (called by
// shared/engines/postgres/directApply.ts, which test/transfer/directApply.test.ts runs; no other target has them).
const PG_INTERNAL = [
  'qualified',
  'claim_batch',
  'begin_direct',
  'direct_window_open',
  'finish_direct',
  'lock_batch',
  'durable_commit',
];

// format_type's names for the types the table uses.
const CATALOG_TYPE: Record<string, string> = {
  bigint: 'bigint',
  boolean: 'boolean',
  integer: 'integer',
  text: 'text',
  'text[]': 'text[]',
  uuid: 'uuid',
  void: 'void',
};

interface CatalogFunction {
  name: string;
  overloads: number;
  argNames: string[];
  argTypes: string[];
  tableColumns: string[];
  returnsSet: boolean;
  returnType: string;
}

describe('transfer target parity: PostgreSQL, the typed table against a migrated target (pg_proc)', () => {
  let pool: pg.Pool;
  let catalog: Map<string, CatalogFunction>;
  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: await createTestDatabase('target-parity'), max: 1 });
    pool.on('error', poolErrorLogger('postgres', 'migration', 'target parity test pool'));
    await migratePostgresTarget(pool);
    const { rows } = await pool.query<CatalogFunction>(
      `select p.proname as name,
              count(*) over (partition by p.proname)::int as overloads,
              coalesce((p.proargnames)[1:p.pronargs], '{}') as "argNames",
              array(select format_type(a.t, null) from unnest(p.proargtypes::oid[]) with ordinality a(t, i) order by a.i)
                as "argTypes",
              array(select n from unnest(p.proargnames, p.proargmodes) as m(n, mode) where m.mode = 't')
                as "tableColumns",
              p.proretset as "returnsSet",
              format_type(p.prorettype, null) as "returnType"
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'keel_transfer'`,
    );
    catalog = new Map(rows.map((r) => [r.name, r]));
  });
  afterAll(async () => {
    await pool?.end();
  });

  it('the table has exactly the procedures and parameters of TARGET_PROCEDURES, in order', () => {
    expect(Object.keys(TARGET_POSTGRES_FUNCTIONS).sort()).toEqual([...PROCS].sort());
    for (const proc of PROCS)
      expect(Object.keys(TARGET_POSTGRES_FUNCTIONS[proc].params), proc).toEqual(TARGET_PROCEDURES[proc].params);
  });

  it('the database declares each function once, with exactly those parameter names and types, returning that', () => {
    const problems: string[] = [];
    for (const proc of PROCS) {
      const want = TARGET_POSTGRES_FUNCTIONS[proc] as PgSignature;
      const got = catalog.get(proc);
      if (!got) {
        problems.push(`keel_transfer.${proc} is missing`);
        continue;
      }
      const wantNames = Object.keys(want.params).map((n) => `p_${n}`);
      const wantTypes = Object.values(want.params).map((t) => CATALOG_TYPE[t]);
      if (got.overloads !== 1) problems.push(`keel_transfer.${proc} has ${got.overloads} overloads`);
      if (got.argNames.join(',') !== wantNames.join(','))
        problems.push(`keel_transfer.${proc}(${got.argNames.join(', ')}) should be (${wantNames.join(', ')})`);
      if (got.argTypes.join(',') !== wantTypes.join(','))
        problems.push(
          `keel_transfer.${proc} takes (${got.argTypes.join(', ')}), the table says (${wantTypes.join(', ')})`,
        );
      if (want.returns === 'rows') {
        // A table function answers exactly the contract's results, by name.
        if (!got.returnsSet) problems.push(`keel_transfer.${proc} returns ${got.returnType}, the table says rows`);
        if (got.tableColumns.join(',') !== TARGET_PROCEDURES[proc].results.join(','))
          problems.push(
            `keel_transfer.${proc} returns (${got.tableColumns.join(', ')}), the contract reads (${TARGET_PROCEDURES[proc].results.join(', ')})`,
          );
      } else {
        if (got.returnsSet || got.returnType !== CATALOG_TYPE[want.returns])
          problems.push(`keel_transfer.${proc} returns ${got.returnType}, the table says ${want.returns}`);
        // A scalar function answers at most the contract's one result.
        if (TARGET_PROCEDURES[proc].results.length > (want.returns === 'void' ? 0 : 1))
          problems.push(`keel_transfer.${proc} returns one value, the contract reads more`);
      }
    }
    expect(problems).toEqual([]);
  });

  it('no keel_transfer function is left out of TARGET_PROCEDURES but the internal helpers', () => {
    expect([...catalog.keys()].filter((n) => !PG_INTERNAL.includes(n)).sort()).toEqual([...PROCS].sort());
  });

  it('a call binds every value as a parameter, by name, refuses a wrong parameter list, and runs', async () => {
    const batchId = randomUUID();
    const claim = targetStatement('try_claim', tryClaimArgs(batchId, 10, 0));
    expect(claim).toEqual({
      text: 'select r.outcome, r.row_count::text as row_count, r.checksum, r.staged from keel_transfer.try_claim(p_batch_id => $1::uuid, p_wait_ms => $2::integer, p_fence_through => $3::bigint) r',
      values: [batchId, 10, 0],
    });
    expect(() => targetStatement('try_claim', { batch_id: batchId, wait: 10 } as never)).toThrow(
      /keel_transfer\.try_claim takes \(batch_id, wait_ms, fence_through\), got \(batch_id, wait\)/,
    );
    // A probe (fence 0) of a batch the target never saw: not applied, nothing staged, nothing kept.
    const [row] = (await pool.query(claim.text, claim.values)).rows;
    expect(toReconcileOutcome(row, batchId, '10 ms')).toEqual({
      outcome: 'not_applied',
      staged: false,
      via: 'claim_obtained',
    });
  });
});

// The members of the package specification: FUNCTION/PROCEDURE NAME(p IN|OUT TYPE, ...) [RETURN TYPE];
interface OracleMember {
  kind: 'FUNCTION' | 'PROCEDURE';
  ins: [string, string][];
  outs: [string, string][];
  returns: string | null;
}
function oracleSpec(): Map<string, OracleMember> {
  const text = readFileSync(path.join(root, 'sql/oracle/R__010_keel_transfer_package.sql'), 'utf8').replace(
    /--[^\n]*/g,
    '',
  );
  const spec = /CREATE OR REPLACE PACKAGE KEEL_TRANSFER\b[\s\S]*?END KEEL_TRANSFER;/.exec(text)![0];
  const found = new Map<string, OracleMember>();
  const re = /\b(FUNCTION|PROCEDURE)\s+(\w+)\s*\(([\s\S]*?)\)\s*(?:RETURN\s+(\w+)\s*)?;/g;
  for (let m = re.exec(spec); m; m = re.exec(spec)) {
    const member: OracleMember = { kind: m[1] as OracleMember['kind'], ins: [], outs: [], returns: m[4] ?? null };
    for (const p of m[3]!.split(',')) {
      const d = /^\s*(\w+)\s+(IN|OUT)\s+(\w+)\s*$/.exec(p);
      if (!d) throw new Error(`cannot read parameter "${p.trim()}" of KEEL_TRANSFER.${m[2]}`);
      (d[2] === 'IN' ? member.ins : member.outs).push([d[1]!, d[3]!]);
    }
    found.set(m[2]!, member);
  }
  return found;
}

describe('transfer target parity: Oracle, the typed table against the package declared in sql/oracle', () => {
  const spec = oracleSpec();

  it('the table has exactly the procedures and parameters of TARGET_PROCEDURES, in order, and reads every result', () => {
    expect(Object.keys(TARGET_ORACLE_PROCEDURES).sort()).toEqual([...PROCS].sort());
    for (const proc of PROCS) {
      const p = TARGET_ORACLE_PROCEDURES[proc] as OracleProcedure<TargetProcedure>;
      expect(Object.keys(p.params), proc).toEqual(TARGET_PROCEDURES[proc].params);
      const read = [...p.outs, ...(p.returns ? [p.returns] : [])].flatMap((o) => (o.result ? [o.result] : []));
      expect(read.sort(), proc).toEqual([...TARGET_PROCEDURES[proc].results].sort());
    }
  });

  it('the package declares each member with exactly those parameters (IN, then OUT) and types, returning that', () => {
    const problems: string[] = [];
    for (const proc of PROCS) {
      const p = TARGET_ORACLE_PROCEDURES[proc] as OracleProcedure<TargetProcedure>;
      const got = spec.get(p.member);
      if (!got) {
        problems.push(`KEEL_TRANSFER.${p.member} is missing`);
        continue;
      }
      const ins = Object.values(p.params).map((x) => `${x.name} ${x.type}`);
      const outs = p.outs.map((o) => `${o.name} ${o.type}`);
      const show = (l: [string, string][]) => l.map(([n, t]) => `${n} ${t}`);
      if (show(got.ins).join(',') !== ins.join(','))
        problems.push(`KEEL_TRANSFER.${p.member} IN (${show(got.ins).join(', ')}), the table says (${ins.join(', ')})`);
      if (show(got.outs).join(',') !== outs.join(','))
        problems.push(
          `KEEL_TRANSFER.${p.member} OUT (${show(got.outs).join(', ')}), the table says (${outs.join(', ')})`,
        );
      if (
        (got.kind === 'FUNCTION') !== (p.returns !== undefined) ||
        (got.returns ?? null) !== (p.returns?.type ?? null)
      )
        problems.push(`KEEL_TRANSFER.${p.member} is a ${got.kind} returning ${got.returns}, the table differs`);
    }
    expect(problems).toEqual([]);
  });

  it('no public member of the package is left out of TARGET_PROCEDURES', () => {
    const members = Object.values(TARGET_ORACLE_PROCEDURES).map((p) => p.member);
    expect([...spec.keys()].sort()).toEqual(members.sort());
  });

  it('a call names every parameter (named notation), binds each by its declared type, and refuses a wrong list', () => {
    const call = oracleStatement('try_claim', tryClaimArgs('b', 1500, 3));
    expect(call.sql).toBe(
      'BEGIN KEEL_TRANSFER.TRY_CLAIM(p_batch_id => :p_batch_id, p_wait_seconds => :p_wait_seconds, p_fence_through => :p_fence_through, o_outcome => :o_outcome, o_row_count => :o_row_count, o_checksum => :o_checksum, o_staged => :o_staged); END;',
    );
    expect(call.binds).toMatchObject({ p_batch_id: 'b', p_wait_seconds: 2, p_fence_through: 3 });
    const staging = oracleStatement('ensure_staging', {
      transfer: 't',
      target_schema: null,
      target_table: 'T',
      columns: ['A', 'B'],
      ops: true,
    });
    expect(staging.binds).toMatchObject({ p_owner: null, p_columns: 'A,B', p_ops: 1 });
    expect(
      oracleStatement('begin_stage', {
        batch_id: 'b',
        transfer: 't',
        expected_count: 1,
        expected_checksum: 'c',
      }).sql,
    ).toMatch(/^BEGIN :o_result := KEEL_TRANSFER\.BEGIN_STAGE\(p_batch_id => :p_batch_id, /);
    expect(() => oracleStatement('purge_staged', { batch_id: 'b' } as never)).toThrow(
      /purge_staged takes \(batch_id, staging_table\), got \(batch_id\)/,
    );
  });
});
