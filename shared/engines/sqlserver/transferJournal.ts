// SQL Server implementation of the transfer journal: every read and write is one stored procedure of
// sql/sqlserver/V020__TransferJournal.sql (the app role keel_executor has EXECUTE only, no table rights), each
// call one request on the pool (no connection is held between calls; XACT_ABORT rolls a cut call back).
// NOT RUN HERE: exercised by test/transfer/sqlserver.test.ts when KEEL_TEST_MSSQL_URL is set.
import sql from 'mssql';
import {
  insertOutcome,
  type BatchEvent,
  type BatchFilter,
  type BatchPatch,
  type BatchRecord,
  type NewBatch,
  type TransferControl,
  type TransferJournal,
} from '../../transfer/journal.js';
import type { BatchState, SchemaColumn } from '../../transfer/types.js';
import type { SqlServerPool } from './pool.js';

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

function toRecord(r: Record<string, unknown>): BatchRecord {
  return {
    batchId: String(r.BatchId).toLowerCase(),
    transferName: String(r.TransferName),
    state: r.State as BatchState,
    attempts: Number(r.Attempts),
    boundaryKind: r.BoundaryKind as BatchRecord['boundaryKind'],
    boundaryLow: (r.BoundaryLow as string | null) ?? null,
    boundaryHigh: String(r.BoundaryHigh),
    schemaHash: String(r.SchemaHash).trim(),
    schemaColumns: JSON.parse(String(r.SchemaColumns)) as SchemaColumn[],
    rowCount: num(r.ManifestRows),
    checksum: (r.ManifestChecksum as string | null) ?? null,
    stagedCount: num(r.StagedRows),
    stagedChecksum: (r.StagedChecksum as string | null) ?? null,
    appliedCount: num(r.AppliedRows),
    lastError: (r.LastError as string | null) ?? null,
    lastErrorCode: (r.LastErrorCode as string | null) ?? null,
    targetReconcileToken: (r.TargetReconcileToken as string | null) ?? null,
    createdAt: r.CreatedAt as Date,
    updatedAt: r.UpdatedAt as Date,
    extractedAt: (r.ExtractedAt as Date | null) ?? null,
    stagedAt: (r.StagedAt as Date | null) ?? null,
    applyStartedAt: (r.ApplyStartedAt as Date | null) ?? null,
    committedAt: (r.CommittedAt as Date | null) ?? null,
    failedAt: (r.FailedAt as Date | null) ?? null,
  };
}

function toControl(r: Record<string, unknown>): TransferControl {
  return {
    transferName: String(r.TransferName),
    paused: r.Paused === true || r.Paused === 1,
    reason: (r.Reason as string | null) ?? null,
    changedBy: (r.ChangedBy as string | null) ?? null,
    changedAt: r.ChangedAt as Date,
  };
}

export class SqlServerTransferJournal implements TransferJournal {
  constructor(private readonly pool: SqlServerPool) {}

  async insertBatch(b: NewBatch): Promise<BatchRecord> {
    const req = await this.pool.request();
    req.input('BatchId', sql.UniqueIdentifier, b.batchId);
    req.input('TransferName', sql.NVarChar(64), b.transferName);
    req.input('BoundaryKind', sql.VarChar(12), b.boundaryKind);
    req.input('BoundaryLow', sql.NVarChar(64), b.boundaryLow);
    req.input('BoundaryHigh', sql.NVarChar(64), b.boundaryHigh);
    req.input('SchemaHash', sql.Char(64), b.schemaHash);
    req.input('SchemaColumns', sql.NVarChar(sql.MAX), JSON.stringify(b.schemaColumns));
    req.input(
      'Detail',
      sql.NVarChar(sql.MAX),
      JSON.stringify({ low: b.boundaryLow, high: b.boundaryHigh, schemaHash: b.schemaHash }),
    );
    const res = await req.execute('keel.TransferBatchInsert');
    const sets = res.recordsets as unknown as Record<string, unknown>[][];
    const o = sets[0]?.[0];
    if (!o) throw new Error(`keel.TransferBatchInsert returned no outcome for batch ${b.batchId}`);
    const conflictId = o.ConflictBatchId ? String(o.ConflictBatchId).toLowerCase() : null;
    return insertOutcome(b, String(o.Outcome), conflictId, (o.ConflictState as string | null) ?? null, () => {
      const row = sets[1]?.[0];
      if (!row) throw new Error(`keel.TransferBatchInsert inserted batch ${b.batchId} but returned no row`);
      return toRecord(row);
    });
  }

  async lastForTransfer(transferName: string) {
    const req = await this.pool.request();
    req.input('TransferName', sql.NVarChar(64), transferName);
    const res = await req.execute('keel.TransferBatchLast');
    const sets = res.recordsets as unknown as Record<string, unknown>[][];
    const open = sets[0]?.[0];
    const last = sets[1]?.[0];
    return { open: open ? toRecord(open) : null, lastCommitted: last ? toRecord(last) : null };
  }

  async get(batchId: string): Promise<BatchRecord | null> {
    const req = await this.pool.request();
    req.input('BatchId', sql.UniqueIdentifier, batchId);
    const res = await req.execute('keel.TransferBatchGet');
    const r = res.recordset?.[0] as Record<string, unknown> | undefined;
    return r ? toRecord(r) : null;
  }

  async list(f: BatchFilter): Promise<BatchRecord[]> {
    const req = await this.pool.request();
    req.input('TransferName', sql.NVarChar(64), f.transfer ?? null);
    req.input('State', sql.VarChar(12), f.state ?? null);
    req.input('AfterId', sql.UniqueIdentifier, f.afterId ?? null);
    req.input('Limit', sql.Int, Math.max(1, Math.min(f.limit, 1000)));
    const res = await req.execute('keel.TransferBatchList');
    return ((res.recordset ?? []) as Record<string, unknown>[]).map(toRecord);
  }

  async events(batchId: string): Promise<BatchEvent[]> {
    const req = await this.pool.request();
    req.input('BatchId', sql.UniqueIdentifier, batchId);
    const res = await req.execute('keel.TransferBatchEventList');
    return ((res.recordset ?? []) as Record<string, unknown>[]).map((r) => ({
      eventId: Number(r.EventId),
      batchId: String(r.BatchId).toLowerCase(),
      at: r.At as Date,
      fromState: (r.FromState as BatchState | null) ?? null,
      toState: (r.ToState as BatchState | null) ?? null,
      event: String(r.Event),
      detail: r.Detail ? (JSON.parse(String(r.Detail)) as Record<string, unknown> | null) : null,
    }));
  }

  async transition(
    batchId: string,
    from: readonly BatchState[],
    to: BatchState,
    patch: BatchPatch,
    event: string,
    detail?: Record<string, unknown>,
  ) {
    const req = await this.pool.request();
    req.input('BatchId', sql.UniqueIdentifier, batchId);
    req.input('FromStates', sql.VarChar(100), from.join(','));
    req.input('ToState', sql.VarChar(12), to);
    const setManifest = patch.rowCount !== undefined || patch.checksum !== undefined;
    req.input('SetManifest', sql.Bit, setManifest);
    req.input('ManifestRows', sql.BigInt, patch.rowCount ?? null);
    req.input('ManifestChecksum', sql.VarChar(24), patch.checksum ?? null);
    const setStaged = patch.stagedCount !== undefined || patch.stagedChecksum !== undefined;
    req.input('SetStaged', sql.Bit, setStaged);
    req.input('StagedRows', sql.BigInt, patch.stagedCount ?? null);
    req.input('StagedChecksum', sql.VarChar(24), patch.stagedChecksum ?? null);
    req.input('SetApplied', sql.Bit, patch.appliedCount !== undefined);
    req.input('AppliedRows', sql.BigInt, patch.appliedCount ?? null);
    req.input('SetLastError', sql.Bit, patch.lastError !== undefined || patch.lastErrorCode !== undefined);
    req.input('LastError', sql.NVarChar(2000), patch.lastError?.slice(0, 2000) ?? null);
    req.input('LastErrorCode', sql.VarChar(64), patch.lastErrorCode ?? null);
    req.input('SetReconcileToken', sql.Bit, patch.targetReconcileToken !== undefined);
    req.input('TargetReconcileToken', sql.VarChar(512), patch.targetReconcileToken ?? null);
    req.input('IncrementAttempts', sql.Bit, !!patch.incrementAttempts);
    req.input('Stamp', sql.VarChar(20), patch.stamp ?? null);
    req.input('Event', sql.VarChar(64), event);
    req.input('Detail', sql.NVarChar(sql.MAX), JSON.stringify(detail ?? null));
    const res = await req.execute('keel.TransferBatchTransition');
    const r = res.recordset?.[0] as Record<string, unknown> | undefined;
    return r ? toRecord(r) : null;
  }

  async note(
    batchId: string,
    event: string,
    detail?: Record<string, unknown>,
    patch?: Pick<BatchPatch, 'lastError' | 'lastErrorCode' | 'targetReconcileToken'>,
  ) {
    const req = await this.pool.request();
    req.input('BatchId', sql.UniqueIdentifier, batchId);
    req.input('Event', sql.VarChar(64), event);
    req.input('Detail', sql.NVarChar(sql.MAX), JSON.stringify(detail ?? null));
    req.input('SetLastError', sql.Bit, patch?.lastError !== undefined || patch?.lastErrorCode !== undefined);
    req.input('LastError', sql.NVarChar(2000), patch?.lastError?.slice(0, 2000) ?? null);
    req.input('LastErrorCode', sql.VarChar(64), patch?.lastErrorCode ?? null);
    req.input('SetReconcileToken', sql.Bit, patch?.targetReconcileToken !== undefined);
    req.input('TargetReconcileToken', sql.VarChar(512), patch?.targetReconcileToken ?? null);
    await req.execute('keel.TransferBatchNote');
  }

  async stale(states: readonly BatchState[], olderThanMs: number, limit: number): Promise<BatchRecord[]> {
    const req = await this.pool.request();
    req.input('States', sql.VarChar(100), states.join(','));
    req.input('OlderThanMs', sql.BigInt, Math.max(0, Math.floor(olderThanMs)));
    req.input('Limit', sql.Int, Math.max(1, Math.min(limit, 1000)));
    const res = await req.execute('keel.TransferBatchStale');
    return ((res.recordset ?? []) as Record<string, unknown>[]).map(toRecord);
  }

  async setPaused(
    transferName: string,
    paused: boolean,
    reason: string | null,
    changedBy: string | null,
  ): Promise<TransferControl> {
    const req = await this.pool.request();
    req.input('TransferName', sql.NVarChar(64), transferName);
    req.input('Paused', sql.Bit, paused);
    req.input('Reason', sql.NVarChar(2000), reason);
    req.input('ChangedBy', sql.NVarChar(256), changedBy);
    const res = await req.execute('keel.TransferControlSet');
    return toControl((res.recordset ?? [])[0] as Record<string, unknown>);
  }

  async controls(): Promise<TransferControl[]> {
    const req = await this.pool.request();
    const res = await req.execute('keel.TransferControlList');
    return ((res.recordset ?? []) as Record<string, unknown>[]).map(toControl);
  }

  async close(): Promise<void> {
    // The pool is shared per process and closed by the host.
  }
}
