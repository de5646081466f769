// The package as another application gets it: built with its own tsconfig, packed with npm pack, unpacked into the
// node_modules of a scratch folder outside the repository (with only its declared dependency, zod, beside it, and
// the producer's own pg). A TypeScript producer type-checks against the declarations (a wrong payload is a compile
// error), and a JavaScript producer enqueues over HTTP with an Entra-style token and inside its own pg transaction;
// the jobs run here, and the rolled-back one does not exist.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineHandler, z } from '../../../shared/jobs/define.js';
import { registerHandlers } from '../../../shared/jobs/handlerFolder.js';
import { withLogin } from '../../../dev/pgAdmin.js';
import { createTestRuntime, type TestRuntime } from '../../../test/functions/support.js';
import { AUDIENCE, easyAuthEnv, startFrontDoor, type FrontDoor } from './support.js';

const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const root = path.resolve(pkgDir, '../..');
const scratch = mkdtempSync(path.join(tmpdir(), 'keel-client-'));
const app = path.join(scratch, 'producer-app');
const PRODUCER = { user: 'keel_client_pack_test', password: 'keel-client-pack-test' };

const shipped = defineHandler('shipment.notify', {
  queue: 'shipping',
  payload: z.strictObject({ shipmentId: z.string() }),
  async handle() {},
});

let t: TestRuntime;
let door: FrontDoor;
let restoreEnv: () => void;

beforeAll(async () => {
  t = await createTestRuntime('client_pack', {
    register: (r) => registerHandlers(r, [{ ...shipped, source: 'test' }]),
  });
  await t.pool.query(
    `do $$ begin create role ${PRODUCER.user} login; exception when duplicate_object or unique_violation then null; end $$`,
  );
  await t.pool.query(`alter role ${PRODUCER.user} with login nosuperuser password '${PRODUCER.password}'`);
  await t.pool.query(`grant keel_producer to ${PRODUCER.user}`);
  restoreEnv = easyAuthEnv();
  door = await startFrontDoor();
});
afterAll(async () => {
  await door?.close();
  restoreEnv?.();
  await t?.close();
  rmSync(scratch, { recursive: true, force: true });
});

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', env, timeout: 120_000 });
  expect(r.status, `${cmd} ${args.join(' ')}\n${r.stdout}\n${r.stderr}`).toBe(0);
  return r.stdout;
}

describe('@keel/client packed and used from a separate application', () => {
  it(
    'builds and packs ESM with type declarations, and nothing but dist/, the README and package.json',
    { timeout: 180_000 },
    () => {
      const stage = path.join(scratch, 'stage');
      mkdirSync(stage);
      const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
      run(
        process.execPath,
        [tsc, '-p', path.join(pkgDir, 'tsconfig.json'), '--outDir', path.join(stage, 'dist')],
        root,
      );
      cpSync(path.join(pkgDir, 'package.json'), path.join(stage, 'package.json'));
      cpSync(path.join(pkgDir, 'README.md'), path.join(stage, 'README.md'));
      const packed = JSON.parse(
        run('npm', ['pack', stage, '--ignore-scripts', '--json', '--pack-destination', scratch], scratch),
      ) as { filename: string; files: { path: string }[] }[];
      const files = packed[0]!.files.map((f) => f.path).sort();
      expect(files).toContain('dist/index.js');
      expect(files).toContain('dist/index.d.ts');
      expect(files).toContain('README.md');
      expect(files.filter((f) => !/^(dist\/|README\.md$|package\.json$)/.test(f))).toEqual([]);
      // Unpacked where npm install would put it, with its one dependency and the producer's own pg beside it.
      const into = path.join(app, 'node_modules', '@keel', 'client');
      mkdirSync(into, { recursive: true });
      run('tar', ['-xzf', path.join(scratch, packed[0]!.filename), '-C', into, '--strip-components=1'], scratch);
      // (Node resolves a linked package's own dependencies from where it really is.)
      for (const dep of ['zod', 'pg', '@types'])
        symlinkSync(path.join(root, 'node_modules', dep), path.join(app, 'node_modules', dep));
      writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'producer-app', type: 'module' }));
      expect(readdirSync(path.join(into, 'dist'))).toContain('pg.d.ts');
    },
  );

  it(
    'type-checks a TypeScript producer against the declarations: a wrong payload is a compile error',
    { timeout: 180_000 },
    () => {
      writeFileSync(
        path.join(app, 'producer.ts'),
        `import { z } from 'zod';
import { jobTypes, KeelHttpClient } from '@keel/client';
const types = jobTypes({ 'shipment.notify': { queue: 'shipping', payload: z.strictObject({ shipmentId: z.string() }) } });
const client = new KeelHttpClient({ baseUrl: 'https://example.invalid', functionKey: 'k', jobTypes: types });
export const ok = () => client.enqueue({ type: 'shipment.notify', payload: { shipmentId: 's-1' } });
// @ts-expect-error shipmentId must be a string
export const bad = () => client.enqueue({ type: 'shipment.notify', payload: { shipmentId: 1 } });
`,
      );
      const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
      run(
        process.execPath,
        [
          tsc,
          '--noEmit',
          '--strict',
          '--module',
          'nodenext',
          '--moduleResolution',
          'nodenext',
          '--target',
          'es2022',
          '--types',
          'node',
          'producer.ts',
        ],
        app,
      );
    },
  );

  it('enqueues over HTTP with an Entra-style token and inside its own pg transaction; the jobs run, the rollback left none', async () => {
    writeFileSync(
      path.join(app, 'producer.mjs'),
      `import pg from 'pg';
import { KeelHttpClient, enqueueInTransaction } from '@keel/client';
const out = {};
const http = new KeelHttpClient({ baseUrl: process.env.KEEL_URL, token: async () => process.env.KEEL_TOKEN });
out.http = await http.enqueue({ type: 'shipment.notify', payload: { shipmentId: 'http-1' } });
const db = new pg.Client({ connectionString: process.env.PRODUCER_DB });
await db.connect();
await db.query('begin');
await enqueueInTransaction(db, { type: 'shipment.notify', queue: 'shipping', payload: { shipmentId: 'rolled-back' } });
await db.query('rollback');
await db.query('begin');
const tx = await enqueueInTransaction(db, { type: 'shipment.notify', queue: 'shipping', payload: { shipmentId: 'tx-1' } });
await db.query('commit');
const sent = [];
out.woken = await tx.wake({ async sendMessage(text) { sent.push(JSON.parse(Buffer.from(text, 'base64').toString())); } });
out.tx = tx.jobs[0];
out.sent = sent;
await db.end();
console.log(JSON.stringify(out));
`,
    );
    const env = {
      PATH: process.env.PATH,
      KEEL_URL: door.baseUrl,
      KEEL_TOKEN: door.issuer.issue({ roles: ['Keel.Producer'], aud: AUDIENCE }),
      PRODUCER_DB: withLogin(t.url, PRODUCER.user, PRODUCER.password),
    };
    // Asynchronously: the front door it calls is served by this process.
    const r = await promisify(execFile)(process.execPath, ['producer.mjs'], { cwd: app, env, timeout: 60_000 });
    const out = JSON.parse(r.stdout) as {
      http: { id: string; duplicate: boolean };
      tx: { id: string; duplicate: boolean };
      woken: number;
      sent: { jobId: string }[];
    };
    expect(out.http.duplicate).toBe(false);
    expect(out.woken).toBe(1);
    expect(out.sent).toEqual([{ jobId: out.tx.id }]);
    for (const id of [out.http.id, out.tx.id]) expect(await t.rt.processor.processById(id)).toBe('succeeded');
    const { rows } = await t.pool.query(
      `select count(*)::int as n from keel.jobs_hot where payload->>'shipmentId' = 'rolled-back'`,
    );
    expect(rows[0].n).toBe(0);
  });
});
