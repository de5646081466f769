// npm run migrate: apply Keel's versioned schema and logic scripts to the control database of the configured
// engine (shared/engines/registry.ts): KEEL_STORE_ENGINE=postgres (default) migrates KEEL_PG_MIGRATE_URL (the schema
// owner's login, docs/postgres.md) or else KEEL_PG_URL; KEEL_STORE_ENGINE=sqlserver KEEL_SQL_CONNECTION (mssql://…
// or ADO style; Entra ID supported).
import { ENGINES, engineNamed } from '../shared/engines/registry.js';
import { warnIfOldNode } from '../dev/nodeVersion.js';

warnIfOldNode();

const name = process.env.KEEL_STORE_ENGINE ?? 'postgres';
const engine = ENGINES.find((e) => e.name === name && e.migrateControl && e.controlSetting);
if (!engine) {
  const known = ENGINES.filter((e) => e.migrateControl && e.controlSetting).map((e) => e.name);
  console.error(`KEEL_STORE_ENGINE must be ${known.join(' or ')} (got "${name}")`);
  process.exit(2);
}
const setting = engine.controlSetting!;
const used = engine.migrateSetting && process.env[engine.migrateSetting] ? engine.migrateSetting : setting;
const connection = process.env[used];
if (!connection) {
  const owner = engine.migrateSetting ? ` (or ${engine.migrateSetting}, preferred: the schema owner's login)` : '';
  // A newcomer's first guess is that npm start's database needs this: it does not, and the owner's URL is printed.
  const local =
    name === 'postgres'
      ? '\nnpm start migrates its embedded PostgreSQL itself; to migrate that one by hand while it runs:\n' +
        '  KEEL_PG_MIGRATE_URL=postgres://postgres:keel-local@127.0.0.1:54329/keel npm run migrate'
      : '';
  console.error(`${setting} is not set${owner}: it must point at the ${name} database to migrate${local}`);
  process.exit(2);
}
// A connection that fails is a message naming the setting, not the driver's error object and stack; the value is
// not echoed (it may hold a password).
const fail = (what: string) => {
  console.error(`npm run migrate: ${used} (${name}): ${what}`);
  process.exit(1);
};
if (name === 'postgres' && !/^postgres(ql)?:\/\//.test(connection)) {
  fail('not a PostgreSQL URL (postgres://user:password@host:port/database)');
}
const result = await engineNamed(name).migrateControl!(
  connection,
  (line) => console.log(line),
  process.env.KEEL_SQL_DIR || undefined,
).catch(
  (err: Error) =>
    // 'localhost' refused on ::1 and 127.0.0.1 is an AggregateError with an empty message of its own.
    fail(
      (err.message ||
        (err instanceof AggregateError ? err.errors.map((e: Error) => e.message).join('; ') : String(err))) +
        // 42501: the app's login (EXECUTE only, docs/postgres.md) was given where the owner's is needed.
        ((err as { code?: string }).code === '42501' && engine.migrateSetting
          ? ` (migrations run as the schema owner: set ${engine.migrateSetting} to the owner's URL)`
          : ''),
    ) as never,
);
console.log(
  `${name}: applied ${result.applied.length} migration(s)${result.applied.length ? `: ${result.applied.join(', ')}` : ''}; ${result.alreadyApplied} already applied`,
);
