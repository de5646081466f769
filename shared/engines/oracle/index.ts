// Oracle: transfer target only (shared/engines/descriptor.ts). oracledb is loaded on first use.
import type { EngineDescriptor } from '../descriptor.js';

export const oracle: EngineDescriptor = {
  name: 'oracle',
  capabilities: { jobStore: false, journal: false, transferSource: false, transferTarget: true },
  telemetryDriver: 'oracledb',
  transferTargetRules: { credentialSettings: true, transactionGuard: true },
  transferSettings: [
    {
      name: 'KEEL_TRANSFER_MIGRATE_ORACLE',
      type: '"true" or unset',
      default: 'unset',
      doc: "apply sql/oracle's target scripts on first use of each target (one instance only: Oracle DDL commits implicitly; docs/transfer.md)",
    },
  ],
  async transferEndpoints(opts) {
    const { OracleTransferEndpoints } = await import('./transferEndpoints.js');
    return new OracleTransferEndpoints(opts);
  },
};
