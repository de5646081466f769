// SQL Server: job store, transfer journal and transfer source (shared/engines/descriptor.ts). Every factory loads
// mssql on first use, so PostgreSQL deployments never load it.
import type { EngineDescriptor } from '../descriptor.js';

export const sqlserver: EngineDescriptor = {
  name: 'sqlserver',
  capabilities: { jobStore: true, journal: true, transferSource: true, transferTarget: false },
  telemetryDriver: 'tedious',
  transferSourceRules: { boundaryKinds: ['key', 'timestamp', 'rowversion', 'changes'] },
  controlSetting: 'KEEL_SQL_CONNECTION',
  // In Azure the app's identity may only EXECUTE the procedures: the schema is installed with `npm run migrate`
  // (docs/sqlserver.md), unless KEEL_MIGRATE_ON_START=true says this login may run DDL.
  async openJobStore(settings) {
    const { SqlServerJobStore } = await import('./jobStore.js');
    return SqlServerJobStore.connect(settings.KEEL_SQL_CONNECTION!, {
      poolSize: settings.KEEL_SQL_POOL_SIZE,
      shared: true,
      migrate: settings.KEEL_MIGRATE_ON_START ?? false,
      ...(settings.KEEL_SQL_DIR ? { sqlDir: settings.KEEL_SQL_DIR } : {}),
      maxPayloadBytes: settings.KEEL_MAX_PAYLOAD_BYTES,
    });
  },
  // A process-wide pool of the journal's own (keyed by application name), so that the journal's timeouts apply to
  // journal calls only.
  async openJournal(settings) {
    const [{ SqlServerTransferJournal }, { sharedSqlServerPool }] = await Promise.all([
      import('./transferJournal.js'),
      import('./pool.js'),
    ]);
    return new SqlServerTransferJournal(
      sharedSqlServerPool(settings.KEEL_SQL_CONNECTION!, {
        max: 4,
        applicationName: 'keel-transfer-journal',
        connectTimeoutMs: settings.KEEL_JOURNAL_CONNECT_TIMEOUT_MS,
        requestTimeoutMs: settings.KEEL_JOURNAL_STATEMENT_TIMEOUT_MS,
      }),
    );
  },
  async migrateControl(connection, log, sqlRoot) {
    const [{ SqlServerPool }, { migrateSqlServerJobs }] = await Promise.all([
      import('./pool.js'),
      import('./jobStore.js'),
    ]);
    const pool = SqlServerPool.create(connection, { max: 1, applicationName: 'keel-migrate', role: 'migration' });
    try {
      return await migrateSqlServerJobs(await pool.get(), log, sqlRoot);
    } finally {
      await pool.close();
    }
  },
  async transferEndpoints(opts) {
    const { SqlServerTransferSource, createMssqlPool } = await import('./transferSource.js');
    const { connectionString } = await import('../../transfer/config.js');
    return {
      async source(t) {
        // Shared per process with the rest of the SQL Server code (closed with the shared pools, closeShared).
        const pool = createMssqlPool(
          connectionString(t.source.connectionSetting, `${t.name}.source`, opts.env),
          opts.timeouts,
        );
        return new SqlServerTransferSource(t, pool);
      },
      async close() {},
    };
  },
  async closeShared() {
    // The store and the journal share the process-wide pools; closing the runtime is closing the process's use.
    const { closeSharedSqlServerPools } = await import('./pool.js');
    await closeSharedSqlServerPools();
  },
};
