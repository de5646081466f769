// The import boundaries of docs/architecture.md, as eslint.config.js enforces them: small fixture files (linted as if
// they sat in each folder) prove that a forbidden import fails and an allowed one passes; and every shipped file is
// checked to get every ban of its folder (a later block matching the same file would replace an earlier block's bans).
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ESLint, type Linter } from 'eslint';
import tseslint from 'typescript-eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const RULE = '@typescript-eslint/no-restricted-imports';

let eslint: ESLint;
beforeAll(async () => {
  const { default: config } = (await import(path.join(root, 'eslint.config.js'))) as { default: Linter.Config[] };
  // The boundary rule needs no type information: lint the fixtures without a TypeScript program.
  eslint = new ESLint({
    cwd: root,
    overrideConfigFile: true,
    overrideConfig: [
      ...config,
      { files: ['**/*.ts'], ...tseslint.configs.disableTypeChecked },
      { languageOptions: { parserOptions: { projectService: false, project: null } } },
    ],
  });
});

async function boundaryErrors(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: path.join(root, file) });
  expect(result!.messages.filter((m) => m.fatal)).toEqual([]);
  return result!.messages.filter((m) => m.ruleId === RULE).map((m) => m.message);
}

// [file the fixture pretends to be, import statement, allowed?]
const CASES: [string, string, boolean][] = [
  // functions/ and every shipped folder: never dev/
  ['functions/x.ts', `import { bootLocal } from '../dev/boot.js';`, false],
  ['functions/x.ts', `import { getRuntime } from '../shared/app/runtime.js';`, true],
  // shared/app (the composition root): not functions/ or dev/, types included
  ['shared/app/x.ts', `import type { LocalHost } from '../../dev/localHost.js';`, false],
  ['shared/app/x.ts', `import { definitions } from '../../functions/definitions.js';`, false],
  ['shared/app/x.ts', `import { engineNamed } from '../engines/registry.js';`, true],
  // engines: below the domain and the root; type imports are no exception (they used to pass for every folder)
  ['shared/engines/postgres/x.ts', `import type { Runtime } from '../../app/runtime.js';`, false],
  ['shared/engines/postgres/x.ts', `import type { OpsRuntime } from '../../ops/context.js';`, false],
  ['shared/engines/postgres/x.ts', `import type { LocalHost } from '../../../dev/localHost.js';`, false],
  ['shared/engines/postgres/x.ts', `import type { JobProcessor } from '../../jobs/processor.js';`, false],
  ['shared/engines/postgres/x.ts', `import { purgeInBatches } from '../../jobs/maintenance.js';`, false],
  ['shared/engines/postgres/x.ts', `import { runAttempt } from '../../jobs/executor.js';`, false],
  ['shared/engines/postgres/x.ts', `import { Worker } from '../../jobs/producer.js';`, false],
  ['shared/engines/postgres/x.ts', `import { parseSettings } from '../../config/settings.js';`, false],
  ['shared/engines/postgres/x.ts', `import type { Settings } from '../../config/settings.js';`, true],
  ['shared/engines/postgres/x.ts', `import type { WakeupSource } from '../../jobs/contract.js';`, true],
  ['shared/engines/postgres/x.ts', `import { sqlDir } from '../../config/sqlDir.js';`, true],
  // the domain (jobs, transfer): no engine, registry, root, ops, functions or dev
  ['shared/jobs/x.ts', `import { PostgresJobStore } from '../engines/postgres/jobStore.js';`, false],
  ['shared/transfer/x.ts', `import { ENGINES } from '../engines/registry.js';`, false],
  ['shared/transfer/x.ts', `import { transferRoutes } from '../ops/transferRoutes.js';`, false],
  ['shared/jobs/x.ts', `import type { Runtime } from '../app/runtime.js';`, false],
  ['shared/jobs/x.ts', `import { bootLocal } from '../../dev/boot.js';`, false],
  ['shared/jobs/x.ts', `import { parseSettings } from '../config/settings.js';`, false],
  ['shared/jobs/x.ts', `import type { EngineDescriptor } from '../engines/descriptor.js';`, true],
  // the closed sets telemetry reads: types only, and not even types from the root or an engine
  ['shared/jobs/contract.ts', `import { LIMITS } from './validate.js';`, false],
  ['shared/jobs/contract.ts', `import type { JobId } from './rows.js';`, true],
  ['shared/transfer/types.ts', `import type { Runtime } from '../app/runtime.js';`, false],
  ['shared/transfer/types.ts', `import type { EngineDescriptor } from '../engines/postgres/index.js';`, false],
  // ops: not the root or an engine
  ['shared/ops/x.ts', `import { getRuntime } from '../app/runtime.js';`, false],
  ['shared/ops/x.ts', `import { engineNamed } from '../engines/registry.js';`, false],
  ['shared/ops/x.ts', `import { purgeInBatches } from '../jobs/maintenance.js';`, true],
  // config: the registry and LIMITS, nothing of the root, ops or a concrete engine
  ['shared/config/x.ts', `import { getRuntime } from '../app/runtime.js';`, false],
  ['shared/config/x.ts', `import { PostgresJobStore } from '../engines/postgres/jobStore.js';`, false],
  ['shared/config/x.ts', `import { enginesWith } from '../engines/registry.js';`, true],
  // telemetry: a leaf
  ['shared/telemetry/x.ts', `import { LIMITS } from '../jobs/validate.js';`, false],
  ['shared/telemetry/x.ts', `import { JOB_OUTCOMES } from '../jobs/contract.js';`, true],
  // handlers/: the handler API only (shared/handlerApi.ts), their own helpers, and in tests the test kit
  ['handlers/x.ts', `import { defineHandler, z, enqueue } from '../shared/handlerApi.js';`, true],
  ['handlers/x.ts', `import { mailer } from './_mailer.js';`, true],
  ['handlers/sub/x.ts', `import { defineSchedule } from '../../shared/handlerApi.js';`, true],
  ['handlers/x.ts', `import { defineHandler } from '../shared/jobs/define.js';`, false],
  ['handlers/x.ts', `import { enqueueJobs } from '../shared/app/enqueue.js';`, false],
  ['handlers/x.ts', `import { JobProcessor } from '../shared/jobs/processor.js';`, false],
  ['handlers/x.ts', `import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';`, false],
  ['handlers/x.ts', `import type { Runtime } from '../shared/app/definitions.js';`, false],
  ['handlers/x.ts', `import { bootLocal } from '../dev/boot.js';`, false],
  ['handlers/x.ts', `import { FakeClock } from '../test/kit.js';`, false],
  ['handlers/x.test.ts', `import { defineHandler } from '../shared/handlerApi.js';`, true],
  ['handlers/x.test.ts', `import { PostgresHarness } from '../test/engines/postgres.harness.js';`, false],
  // packages/client: itself, zod and Node only
  ['packages/client/src/x.ts', `import { LIMITS } from './rules.js';`, true],
  ['packages/client/src/x.ts', `import { z } from 'zod';`, true],
  ['packages/client/src/x.ts', `import { LIMITS } from '../../../shared/jobs/validate.js';`, false],
  ['handlers/x.test.ts', `import { FakeClock } from '../test/kit.js';`, true],
  // tools around the app may import anything
  ['dev/x.ts', `import { PostgresJobStore } from '../shared/engines/postgres/jobStore.js';`, true],
];

describe('import boundaries (eslint.config.js)', () => {
  it.each(CASES)('%s: %s → allowed: %s', async (file, code, allowed) => {
    const errors = await boundaryErrors(file, `${code}\n`);
    if (allowed) expect(errors).toEqual([]);
    else expect(errors.length).toBeGreaterThan(0);
  });

  // A ban that a later, more specific block dropped would show up here, for whichever file it is.
  it('every shipped file gets the bans of its folder and of shared/', async () => {
    const shipped = ['functions', 'shared', 'handlers'].flatMap((dir) =>
      readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
        .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
        .map((f) => path.join(dir, f)),
    );
    expect(shipped.length).toBeGreaterThan(50);
    const missing: string[] = [];
    for (const file of shipped) {
      const config = (await eslint.calculateConfigForFile(path.join(root, file))) as Linter.Config;
      const options = config.rules?.[RULE] as [unknown, { patterns: { group?: string[]; regex?: string }[] }];
      const text = JSON.stringify(options?.[1]?.patterns ?? []);
      const need = file.startsWith('handlers/')
        ? ['**/shared/**', '!**/shared/handlerApi*', '**/dev/*', '**/functions/*', '**/test/*']
        : file.startsWith('functions/')
          ? ['**/dev/*']
          : ['**/dev/*', '**/functions/*'];
      if (file.startsWith('shared/engines/')) need.push('**/app/*', '**/ops/*', '**/jobs/processor*');
      if (/^shared\/(jobs|transfer)\//.test(file)) need.push('**/app/*', '**/ops/*', '**/engines/registry*');
      if (file.startsWith('shared/ops/')) need.push('**/app/*', '**/engines/registry*');
      for (const n of need) if (!text.includes(n.replaceAll('\\', '\\\\'))) missing.push(`${file}: ${n}`);
    }
    expect(missing).toEqual([]);
  });
});

// One configuration model (docs/architecture.md, "Configuration"): below the composition root, nothing reads the
// process environment; settings arrive as Settings or as an explicit env argument.
async function envErrors(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(`${code}\n`, { filePath: path.join(root, file) });
  expect(result!.messages.filter((m) => m.fatal)).toEqual([]);
  return result!.messages.filter((m) => m.ruleId === 'no-restricted-syntax').map((m) => m.message);
}

const ENV_CASES: [string, string, boolean][] = [
  ['shared/jobs/x.ts', `export const dir = process.env.KEEL_HANDLERS_DIR;`, false],
  ['shared/transfer/x.ts', `export function f(env: NodeJS.ProcessEnv = process.env) { return env; }`, false],
  ['shared/ops/x.ts', `export const site = globalThis.process.env.WEBSITE_SITE_NAME;`, false],
  [
    'shared/telemetry/x.ts',
    `const { env } = process;\nexport const cs = env.APPLICATIONINSIGHTS_CONNECTION_STRING;`,
    false,
  ],
  [
    'shared/engines/oracle/x.ts',
    `import { env } from 'node:process';\nexport const m = env.KEEL_TRANSFER_MIGRATE_ORACLE;`,
    false,
  ],
  ['shared/config/x.ts', `import process from 'node:process';\nexport const d = process.env.KEEL_SQL_DIR;`, false],
  // the rest of the composition root and the entry points take it from shared/app/environment.ts
  ['shared/app/x.ts', `export const env = process.env;`, false],
  ['functions/x.ts', `export const env = process.env;`, false],
  ['shared/app/environment.ts', `export const env = () => process.env;`, true],
  [
    'functions/x.ts',
    `import { processEnv } from '../shared/app/environment.js';\nexport const env = processEnv();`,
    true,
  ],
  // an explicit env argument, and the rest of process, are fine
  ['shared/transfer/x.ts', `export function f(env: NodeJS.ProcessEnv) { return env.KEEL_TRANSFERS; }`, true],
  ['shared/jobs/x.ts', `export const pid = process.pid;`, true],
  // spellings that reach env without naming process.env
  ['shared/jobs/x.ts', `export const e = process['env'];`, false],
  ['shared/ops/x.ts', `import * as proc from 'node:process';\nexport const e = proc.env;`, false],
  ['functions/x.ts', `import proc from 'process';\nexport const e = proc.env;`, false],
  // handlers (shipped) take their own settings through the handler API; the client package takes options
  ['handlers/x.ts', `export const hosts = process.env.WEBHOOK_ALLOWED_HOSTS;`, false],
  [
    'handlers/x.ts',
    `import { appSetting } from '../shared/handlerApi.js';\nexport const hosts = appSetting('WEBHOOK_ALLOWED_HOSTS');`,
    true,
  ],
  ['packages/client/src/x.ts', `export const url = process.env.KEEL_URL;`, false],
  // local tools have their own composition roots, and so do tests, wherever they sit
  ['dev/x.ts', `export const url = process.env.KEEL_PG_URL;`, true],
  ['scripts/x.ts', `export const url = process.env.KEEL_PG_URL;`, true],
  ['bench/x.ts', `export const url = process.env.KEEL_PG_URL;`, true],
  ['test/x.ts', `export const url = process.env.KEEL_PG_URL;`, true],
  ['handlers/x.test.ts', `export const hosts = process.env.WEBHOOK_ALLOWED_HOSTS;`, true],
];

describe('process.env is read by the composition root only (eslint.config.js)', () => {
  it.each(ENV_CASES)('%s: %s → allowed: %s', async (file, code, allowed) => {
    const errors = await envErrors(file, code);
    if (allowed) expect(errors).toEqual([]);
    else {
      expect(errors.length).toBeGreaterThan(0);
      expect(errors[0]).toMatch(/read only by shared\/app\/environment\.ts.*settingsIndex/);
    }
  });

  it('no shipped file outside shared/app/environment.ts escapes the rule', async () => {
    const shipped = ['functions', 'shared', 'handlers', 'packages/client/src'].flatMap((dir) =>
      readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
        .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
        .map((f) => path.join(dir, f)),
    );
    const unguarded: string[] = [];
    for (const file of shipped) {
      const config = (await eslint.calculateConfigForFile(path.join(root, file))) as Linter.Config;
      const options = config.rules?.['no-restricted-syntax'] as unknown[] | undefined;
      if (!JSON.stringify(options ?? []).includes("[object.name='process'][property.name='env']")) unguarded.push(file);
    }
    expect(unguarded).toEqual(['shared/app/environment.ts']);
  });
});
