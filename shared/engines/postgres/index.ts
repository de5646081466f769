// PostgreSQL: job store, transfer journal, transfer source and target (shared/engines/descriptor.ts).
import type { EngineDescriptor } from '../descriptor.js';

export const postgres: EngineDescriptor = {
  name: 'postgres',
  capabilities: { jobStore: true, journal: true, transferSource: true, transferTarget: true },
  telemetryDriver: 'pg',
  transferSourceRules: { boundaryKinds: ['key', 'timestamp', 'changes'] },
  transferTargetRules: { credentialSettings: false, transactionGuard: false },
  controlSetting: 'KEEL_PG_URL',
  // The owner's URL when the app's own (KEEL_PG_URL) is the least-privilege login (docs/postgres.md).
  migrateSetting: 'KEEL_PG_MIGRATE_URL',
  async openJobStore(settings) {
    const { PostgresJobStore } = await import('./jobStore.js');
    return PostgresJobStore.connect(settings.KEEL_PG_URL!, {
      poolSize: settings.KEEL_PG_POOL_SIZE,
      poolIdleMs: settings.KEEL_PG_POOL_IDLE_MS,
      migrate: settings.KEEL_MIGRATE_ON_START ?? true,
      ...(settings.KEEL_PG_MIGRATE_URL ? { migrateUrl: settings.KEEL_PG_MIGRATE_URL } : {}),
      ...(settings.KEEL_SQL_DIR ? { sqlDir: settings.KEEL_SQL_DIR } : {}),
      maxPayloadBytes: settings.KEEL_MAX_PAYLOAD_BYTES,
    });
  },
  async openJournal(settings) {
    const { createJournalPool, PostgresTransferJournal } = await import('./transferJournal.js');
    const pool = createJournalPool(settings.KEEL_PG_URL!, {
      max: 4,
      connectTimeoutMs: settings.KEEL_JOURNAL_CONNECT_TIMEOUT_MS,
      statementTimeoutMs: settings.KEEL_JOURNAL_STATEMENT_TIMEOUT_MS,
      idleInTransactionTimeoutMs: settings.KEEL_JOURNAL_IDLE_TX_TIMEOUT_MS,
    });
    return new PostgresTransferJournal(pool, { ownsPool: true });
  },
  async migrateControl(connection, _log, sqlRoot) {
    const [{ default: pg }, { migratePostgres }] = await Promise.all([import('pg'), import('./jobStore.js')]);
    const pool = new pg.Pool({ connectionString: connection, max: 1 });
    try {
      const result = await migratePostgres(pool, sqlRoot);
      return { applied: result.applied, alreadyApplied: result.alreadyApplied };
    } finally {
      await pool.end();
    }
  },
  async transferEndpoints(opts) {
    const { PostgresTransferEndpoints } = await import('./transferEndpoints.js');
    return new PostgresTransferEndpoints(opts);
  },
};
