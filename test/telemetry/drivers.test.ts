// "A PostgreSQL deployment never loads mssql or oracledb" (docs/architecture.md), with Application Insights on as in
// Azure: the app starts in a child process (a clean module cache) and reports which drivers it loaded. The telemetry
// instrumentations are registered per engine as it is opened (shared/engines/registry.ts), so only pg is loaded.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/pg.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('database drivers loaded by a PostgreSQL deployment', () => {
  it('with telemetry on, loads and instruments pg only: never mssql, tedious or oracledb', async () => {
    const url = await createTestDatabase('drivers');
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.KEEL_TRUST_CLIENT_PRINCIPAL; // refused under the Functions host (functions/app.ts)
    Object.assign(env, {
      // An ingestion endpoint nothing listens on: the exporters fail quietly, nothing leaves the machine.
      APPLICATIONINSIGHTS_CONNECTION_STRING:
        'InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=https://127.0.0.1:9;LiveEndpoint=https://127.0.0.1:9',
      KEEL_STORE_ENGINE: 'postgres',
      KEEL_PG_URL: url,
      KEEL_TRANSFERS: '',
      AzureWebJobsStorage: 'UseDevelopmentStorage=true', // queues are made lazily: nothing connects
    });
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', path.join(root, 'test/telemetry/driverProbe.ts')],
      { cwd: root, env, timeout: 170_000 }, // tsx compiling the app and the Azure Monitor SDK: over 60 s on a loaded machine
    );
    const report = JSON.parse(stdout.trim().split('\n').at(-1)!) as { drivers: string[]; instrumented: string[] };
    expect(report).toEqual({ drivers: ['pg'], instrumented: ['pg'] });
  }, 180_000);
});
