// npm run migrate: apply Keel's versioned schema and logic scripts to the control database of the configured
// engine (shared/engines/registry.ts): KEEL_STORE_ENGINE=postgres (default) migrates KEEL_PG_MIGRATE_URL (the schema
// owner's login, docs/postgres.md) or else KEEL_PG_URL; KEEL_STORE_ENGINE=sqlserver KEEL_SQL_CONNECTION (mssql://…
// or ADO style; Entra ID supported).
import { ENGINES, engineNamed } from '../shared/engines/registry.js';

const name = process.env.KEEL_STORE_ENGINE ?? 'postgres';
const engine = ENGINES.find((e) => e.name === name && e.migrateControl && e.controlSetting);
if (!engine) {
  const known = ENGINES.filter((e) => e.migrateControl && e.controlSetting).map((e) => e.name);
  console.error(`KEEL_STORE_ENGINE must be ${known.join(' or ')} (got "${name}")`);
  process.exit(2);
}
const setting = engine.controlSetting!;
const connection = (engine.migrateSetting && process.env[engine.migrateSetting]) || process.env[setting];
if (!connection) {
  console.error(`${setting} is not set: it must point at the ${name} database to migrate`);
  process.exit(2);
}
const result = await engineNamed(name).migrateControl!(
  connection,
  (line) => console.log(line),
  process.env.KEEL_SQL_DIR || undefined,
);
console.log(
  `${name}: applied ${result.applied.length} migration(s)${result.applied.length ? `: ${result.applied.join(', ')}` : ''}; ${result.alreadyApplied} already applied`,
);
