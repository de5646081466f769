// Transfers are declared in configuration: the KEEL_TRANSFERS app setting (JSON array) or a JSON file named by
// KEEL_TRANSFERS_FILE. Invalid configuration fails at startup with the setting at fault, e.g.
// "KEEL_TRANSFERS[0].keyColumns: Required".
import { ncrontabProblem } from '../jobs/ncrontab.js';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { IDENTIFIER_PATTERN, parseQualified, type QualifiedName } from './identifiers.js';
import { TransferError } from './errors.js';
import type { BoundaryKind } from './types.js';
import type { SettingDeclaration } from '../config/declaration.js';

// What the configuration check needs to know of the engines, declared by each engine's descriptor
// (shared/engines/descriptor.ts) and gathered by the composition root (transferEngineRules() in
// shared/engines/registry.ts): no engine is named here.
export interface TransferSourceRules {
  boundaryKinds: readonly BoundaryKind[]; // the window kinds this source can read
}
export interface TransferTargetRules {
  credentialSettings: boolean; // takes userSetting/passwordSetting beside a connect string (else one URL)
  transactionGuard: boolean; // takes transactionGuard: true (reconcile may ask Transaction Guard)
}
export interface TransferEngineRules {
  sources: Readonly<Record<string, TransferSourceRules>>;
  targets: Readonly<Record<string, TransferTargetRules>>;
}

const identifier = z
  .string()
  .regex(IDENTIFIER_PATTERN, 'must be a plain identifier (letters, digits, underscore; not starting with a digit)');
const qualified = z
  .string()
  .regex(
    /^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$/,
    'must be table or schema.table, plain identifiers only',
  );
const settingName = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be the name of an app setting that holds the connection string');

const sourceSchema = z
  .object({
    engine: z.string(), // one of TransferEngineRules.sources (checked with the rules below)
    connectionSetting: settingName,
    table: qualified.optional(),
    query: z.string().min(1).optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
    if (!!s.table === !!s.query) ctx.addIssue({ code: 'custom', message: 'exactly one of table or query is required' });
    if (s.query && /;\s*\S/.test(s.query))
      ctx.addIssue({ code: 'custom', path: ['query'], message: 'must be a single SELECT statement' });
  });

const targetSchema = z
  .object({
    engine: z.string(), // one of TransferEngineRules.targets (checked with the rules below)
    connectionSetting: settingName,
    table: qualified,
    // Targets with the transactionGuard rule only (Oracle): the service has COMMIT_OUTCOME enabled, so reconcile
    // also asks Transaction Guard.
    transactionGuard: z.boolean().default(false),
    // Targets with credentialSettings only (Oracle), both or neither: credentials in their own app settings (Key
    // Vault references in Azure); then connectionSetting holds the connect string alone (host:port/service).
    userSetting: settingName.optional(),
    passwordSetting: settingName.optional(),
  })
  .strict()
  .superRefine((t, ctx) => {
    if (!!t.userSetting !== !!t.passwordSetting) {
      ctx.addIssue({
        code: 'custom',
        path: [t.userSetting ? 'passwordSetting' : 'userSetting'],
        message: 'userSetting and passwordSetting go together',
      });
    }
  });

// A schedule as the transfer timer reads it (NCRONTAB, shared/jobs/ncrontab.ts): what Azure's timers would refuse
// is refused with the reason, naming the cron field at fault.
function cronCheck(v: string, ctx: z.core.$RefinementCtx<string>): void {
  const problem = ncrontabProblem(v);
  if (problem) ctx.addIssue({ code: 'custom', message: `must be a six-field NCRONTAB expression: ${problem}` });
}

const boundarySchema = z
  .object({
    // The column the windows run over; none for 'changes' (they run over the source's change-tracking versions).
    column: identifier.optional(),
    // key: an integer column; timestamp: timestamp/timestamptz (PostgreSQL); rowversion: SQL Server rowversion;
    // changes: version windows of the source's change tracking, carrying deletes (shared/transfer/changes.ts).
    kind: z.enum(['key', 'timestamp', 'rowversion', 'changes']),
    // timestamp windows only: rows newer than now - settleMs are left for a later batch (in-flight transactions).
    settleMs: z.number().int().min(0).default(0),
  })
  .strict()
  .superRefine((b, ctx) => {
    if (b.kind === 'changes' && b.column !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['column'],
        message: 'changes windows run over the change-tracking versions, not a column: remove boundary.column',
      });
    if (b.kind !== 'changes' && b.column === undefined)
      ctx.addIssue({ code: 'custom', path: ['column'], message: `Required (a ${b.kind} window runs over a column)` });
  });

// Declared value policies (shared/transfer/policies.ts, docs/transfer.md "Value policies"): the conversions a user
// accepts for one column. Without one, a value the target cannot hold unchanged is refused.
const columnSchema = z
  .object({
    source: identifier,
    target: identifier,
    // text or binary column: an empty value ('' or zero bytes) is staged as NULL ('refuse', the default: the batch
    // is refused, since Oracle would store NULL for it).
    empty: z.enum(['refuse', 'null']).optional(),
    // float/real column: 'double' keeps the exact double (Oracle BINARY_DOUBLE, PostgreSQL double precision);
    // { decimal: [p, s] } rounds it half away from zero to s digits, refusing a value over p digits.
    float: z
      .union([
        z.literal('double'),
        z
          .object({
            decimal: z.tuple([z.number().int().min(1).max(38), z.number().int().min(0).max(38)]),
          })
          .strict(),
      ])
      .optional(),
    // timestamp column (no zone): 'seconds' cuts the fraction of a second, so an Oracle DATE column can hold it.
    datetime: z.literal('seconds').optional(),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (typeof c.float === 'object' && c.float.decimal[1] > c.float.decimal[0])
      ctx.addIssue({
        code: 'custom',
        path: ['float', 'decimal'],
        message: `[${c.float.decimal.join(', ')}] is not a decimal(p, s): the scale s must not exceed the precision p`,
      });
    const declared = (['empty', 'float', 'datetime'] as const).filter((k) => c[k] !== undefined && c[k] !== 'refuse');
    if (declared.length > 1)
      ctx.addIssue({
        code: 'custom',
        path: [declared[1]!],
        message: `column ${c.source} declares both ${declared.join(' and ')}; a column takes at most one value policy`,
      });
  });

export const transferSchema = z
  .object({
    name: z
      .string()
      .regex(
        /^[a-z][a-z0-9_]{0,39}$/,
        'must be lower-case letters, digits and underscores, at most 40, starting with a letter',
      ),
    source: sourceSchema,
    target: targetSchema,
    keyColumns: z.array(identifier).min(1, 'needs at least one key column'),
    boundary: boundarySchema,
    columns: z.array(columnSchema).min(1, 'needs at least one column mapping'),
    batchSize: z.number().int().min(1).max(50_000_000).default(100_000),
    chunkSize: z.number().int().min(1).max(100_000).default(5_000),
    reconcileWaitMs: z.number().int().min(0).max(60_000).default(2_000),
    // Deletes for a transfer without change tracking (docs/transfer.md "Deletes"): compare the key sets of source and
    // target per committed key window; 'report' only reports target keys gone at the source, 'apply' also deletes
    // them. Key windows over a key column only.
    keyCompare: z.enum(['off', 'report', 'apply']).default('off'),
    // A key-set comparison run by the transfer timer (six-field NCRONTAB, UTC; due when it has an occurrence since the
    // timer's previous tick): it reports (event keel.transfer.keys_gone, alert transfer-keys-gone) and deletes only
    // with keyCompare 'apply'. Absent: only the route compares.
    keyCompareSchedule: z.string().trim().superRefine(cronCheck).optional(),
    // When the timer starts this transfer: a six-field NCRONTAB expression (UTC), checked at every timer tick
    // (KEEL_TRANSFER_SCHEDULE, which must fire at least as often). Absent: every tick.
    schedule: z.string().trim().superRefine(cronCheck).optional(),
    // After schema drift is reviewed: the new schema hash to accept for the next batch.
    acceptSchemaHash: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .optional(),
  })
  .strict()
  .superRefine((t, ctx) => {
    const sources = new Set<string>();
    const targets = new Set<string>();
    t.columns.forEach((c, i) => {
      if (sources.has(c.source))
        ctx.addIssue({
          code: 'custom',
          path: ['columns', i, 'source'],
          message: `source column ${c.source} is mapped twice`,
        });
      if (targets.has(c.target))
        ctx.addIssue({
          code: 'custom',
          path: ['columns', i, 'target'],
          message: `target column ${c.target} is mapped twice`,
        });
      sources.add(c.source);
      targets.add(c.target);
    });
    t.keyColumns.forEach((k, i) => {
      if (!sources.has(k))
        ctx.addIssue({
          code: 'custom',
          path: ['keyColumns', i],
          message: `key column ${k} is not in columns[].source`,
        });
    });
    if (t.keyCompare !== 'off' && (t.boundary.kind !== 'key' || !t.keyColumns.includes(t.boundary.column ?? '')))
      ctx.addIssue({
        code: 'custom',
        path: ['keyCompare'],
        message:
          t.boundary.kind === 'changes'
            ? 'a changes transfer carries deletes itself: keyCompare is for transfers without change tracking'
            : 'compares key windows: boundary.kind must be key, over one of the keyColumns (other windows move with updates, so a row would look deleted)',
      });
    if (t.keyCompareSchedule !== undefined && t.keyCompare === 'off')
      ctx.addIssue({
        code: 'custom',
        path: ['keyCompareSchedule'],
        message: 'schedules a key-set comparison: set keyCompare to report or apply',
      });
    if (t.boundary.kind === 'changes' && t.source.query)
      ctx.addIssue({
        code: 'custom',
        path: ['source', 'query'],
        message: "changes windows read a table's change tracking: give source.table, not a query",
      });
    if (new Set(t.keyColumns).size !== t.keyColumns.length)
      ctx.addIssue({ code: 'custom', path: ['keyColumns'], message: 'key columns repeat' });
    // A policy changes values; a key changed on its way would merge onto another row (or be NULL).
    t.columns.forEach((c, i) => {
      if (!t.keyColumns.includes(c.source)) return;
      for (const k of ['empty', 'float', 'datetime'] as const)
        if (c[k] !== undefined && c[k] !== 'refuse')
          ctx.addIssue({
            code: 'custom',
            path: ['columns', i, k],
            message: `key column ${c.source} cannot take a value policy (a converted key could match another row)`,
          });
    });
  });

// The engine-specific rules, from the engines' own declarations.
function checkEngines(t: z.output<typeof transferSchema>, rules: TransferEngineRules, ctx: z.RefinementCtx): void {
  const issue = (path: (string | number)[], message: string) => ctx.addIssue({ code: 'custom', path, message });
  const source = rules.sources[t.source.engine];
  const target = rules.targets[t.target.engine];
  if (!Object.hasOwn(rules.sources, t.source.engine) || !source)
    issue(
      ['source', 'engine'],
      `must be one of ${Object.keys(rules.sources).join(', ')} (the transfer source engines)`,
    );
  else if (!source.boundaryKinds.includes(t.boundary.kind)) {
    const able = Object.keys(rules.sources).filter((e) => rules.sources[e]!.boundaryKinds.includes(t.boundary.kind));
    issue(
      ['boundary', 'kind'],
      `${t.boundary.kind} windows need a ${able.join(' or ') || 'different'} source (a ${t.source.engine} source reads ${source.boundaryKinds.join(', ')})`,
    );
  }
  if (!Object.hasOwn(rules.targets, t.target.engine) || !target)
    issue(
      ['target', 'engine'],
      `must be one of ${Object.keys(rules.targets).join(', ')} (the transfer target engines)`,
    );
  else if (t.target.userSetting && !target.credentialSettings) {
    const able = Object.keys(rules.targets).filter((e) => rules.targets[e]!.credentialSettings);
    issue(
      ['target', 'userSetting'],
      `only for a target that takes credential settings (${able.join(', ')}); a ${t.target.engine} target takes its credentials in connectionSetting`,
    );
  }
  if (target && t.target.transactionGuard && !target.transactionGuard) {
    const able = Object.keys(rules.targets).filter((e) => rules.targets[e]!.transactionGuard);
    issue(
      ['target', 'transactionGuard'],
      `only for a target with Transaction Guard (${able.join(', ')}); a ${t.target.engine} target reconciles from its completion row`,
    );
  }
}

function transfersSchema(rules: TransferEngineRules) {
  return z.array(transferSchema.superRefine((t, ctx) => checkEngines(t, rules, ctx)));
}

export type TransferConfig = z.output<typeof transferSchema>;
export type TransferInput = z.input<typeof transferSchema>;

// The boundary column of a column window (every kind but 'changes', which the configuration check guarantees).
export function boundaryColumn(t: TransferConfig): string {
  if (t.boundary.column === undefined)
    throw new TransferError('config_invalid', `transfer ${t.name}: a ${t.boundary.kind} window has no boundary column`);
  return t.boundary.column;
}

export interface ResolvedNames {
  sourceTable: QualifiedName | null;
  targetTable: QualifiedName;
}

export function resolvedNames(t: TransferConfig): ResolvedNames {
  return {
    sourceTable: t.source.table ? parseQualified(t.source.table, `${t.name}.source.table`) : null,
    targetTable: parseQualified(t.target.table, `${t.name}.target.table`),
  };
}

function formatPath(root: string, path: readonly PropertyKey[]): string {
  let out = root;
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : `.${String(p)}`;
  return out;
}

export function parseTransfers(value: unknown, rules: TransferEngineRules, root = 'KEEL_TRANSFERS'): TransferConfig[] {
  // A missing field says so ("Required"), rather than zod's "expected string, received undefined".
  const result = transfersSchema(rules).safeParse(value, {
    error: (issue) => (issue.code === 'invalid_type' && issue.input === undefined ? 'Required' : undefined),
  });
  if (!result.success) {
    // An issue inside a column mapping also names the transfer and the column (the path has only indexes).
    const about = (path: readonly PropertyKey[]): string => {
      const t = Array.isArray(value) && typeof path[0] === 'number' ? (value[path[0]] as unknown) : undefined;
      const name = (t as { name?: unknown } | undefined)?.name;
      if (typeof name !== 'string' || path[1] !== 'columns' || typeof path[2] !== 'number') return '';
      const col = ((t as { columns?: unknown }).columns as { source?: unknown }[] | undefined)?.[path[2]]?.source;
      return ` (transfer ${name}${typeof col === 'string' ? `, column ${col}` : ''})`;
    };
    const lines = result.error.issues.map((i) => `${formatPath(root, i.path)}${about(i.path)}: ${i.message}`);
    throw new TransferError('config_invalid', `invalid transfer configuration: ${lines.join('; ')}`, { issues: lines });
  }
  const names = new Set<string>();
  result.data.forEach((t, i) => {
    if (names.has(t.name))
      throw new TransferError(
        'config_invalid',
        `invalid transfer configuration: ${root}[${i}].name: "${t.name}" is declared twice`,
      );
    names.add(t.name);
  });
  return result.data;
}

// The fixed-name settings loadTransfers parses (shared/app/settingsIndex.ts). The others are not fixed: each transfer
// names the app settings holding its connections (connectionSetting, userSetting, passwordSetting), read by
// connectionString below from the same environment.
export const TRANSFER_CONFIG_SETTINGS: readonly SettingDeclaration[] = [
  {
    name: 'KEEL_TRANSFERS',
    type: 'JSON array of transfers (docs/transfer.md)',
    default: 'unset',
    doc: 'the transfers this app runs; set this or KEEL_TRANSFERS_FILE, not both',
  },
  {
    name: 'KEEL_TRANSFERS_FILE',
    type: 'path to a JSON file of the same shape',
    default: 'unset',
    doc: 'the transfers, from a file',
  },
];

// Reads KEEL_TRANSFERS (JSON) or KEEL_TRANSFERS_FILE (path to JSON). Neither set: no transfers.
export function loadTransfers(rules: TransferEngineRules, env: NodeJS.ProcessEnv): TransferConfig[] {
  const inline = env.KEEL_TRANSFERS;
  const file = env.KEEL_TRANSFERS_FILE;
  if (inline && file)
    throw new TransferError(
      'config_invalid',
      'invalid transfer configuration: set KEEL_TRANSFERS or KEEL_TRANSFERS_FILE, not both',
    );
  let raw: string;
  let root: string;
  if (inline) {
    raw = inline;
    root = 'KEEL_TRANSFERS';
  } else if (file) {
    root = `KEEL_TRANSFERS_FILE(${file})`;
    try {
      raw = readFileSync(file, 'utf8');
    } catch (err) {
      throw new TransferError(
        'config_invalid',
        `invalid transfer configuration: KEEL_TRANSFERS_FILE: cannot read ${file}: ${(err as Error).message}`,
      );
    }
  } else return [];
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    throw new TransferError(
      'config_invalid',
      `invalid transfer configuration: ${root}: not valid JSON (${(err as Error).message})`,
    );
  }
  return parseTransfers(value, rules, root);
}

// Connection strings are secrets: configuration names the app setting, the value is read here.
export function connectionString(
  setting: string,
  what: string,
  env: NodeJS.ProcessEnv,
  field = 'connectionSetting',
): string {
  const v = env[setting];
  if (!v)
    throw new TransferError(
      'config_invalid',
      `invalid transfer configuration: ${what}.${field}: app setting ${setting} is not set`,
    );
  return v;
}
