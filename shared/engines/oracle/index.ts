// Oracle: transfer target only (shared/engines/descriptor.ts). oracledb is loaded on first use.
import type { EngineDescriptor } from '../descriptor.js';

export const oracle: EngineDescriptor = {
  name: 'oracle',
  capabilities: { jobStore: false, journal: false, transferSource: false, transferTarget: true },
  telemetryDriver: 'oracledb',
  transferTargetRules: { credentialSettings: true, transactionGuard: true },
  async transferEndpoints(opts) {
    const { OracleTransferEndpoints } = await import('./transferEndpoints.js');
    return new OracleTransferEndpoints(opts);
  },
};
