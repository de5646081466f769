// PostgreSQL implementation of the transfer journal (keel.transfer_batches, keel.transfer_batch_events; V020).
import type pg from 'pg';
import { TransferError } from '../../transfer/errors.js';
import type { BatchEvent, BatchFilter, BatchPatch, BatchRecord, NewBatch, TransferJournal } from '../../transfer/journal.js';
import type { BatchState, SchemaColumn } from '../../transfer/types.js';

const COLUMNS = `batch_id::text as batch_id, transfer_name, state, attempts, boundary_kind, boundary_low, boundary_high,
  schema_hash, schema_columns, row_count::text as row_count, checksum, staged_count::text as staged_count, staged_checksum,
  applied_count::text as applied_count, last_error, last_error_code, target_ltxid, created_at, updated_at, extracted_at,
  staged_at, apply_started_at, committed_at, failed_at`;

const STAMPS = new Set(['extracted_at', 'staged_at', 'apply_started_at', 'committed_at', 'failed_at']);

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

export function rowToBatch(r: Record<string, unknown>): BatchRecord {
  return {
    batchId: String(r.batch_id),
    transferName: String(r.transfer_name),
    state: r.state as BatchState,
    attempts: Number(r.attempts),
    boundaryKind: r.boundary_kind as BatchRecord['boundaryKind'],
    boundaryLow: (r.boundary_low as string | null) ?? null,
    boundaryHigh: String(r.boundary_high),
    schemaHash: String(r.schema_hash),
    schemaColumns: (typeof r.schema_columns === 'string' ? JSON.parse(r.schema_columns) : r.schema_columns) as SchemaColumn[],
    rowCount: num(r.row_count),
    checksum: (r.checksum as string | null) ?? null,
    stagedCount: num(r.staged_count),
    stagedChecksum: (r.staged_checksum as string | null) ?? null,
    appliedCount: num(r.applied_count),
    lastError: (r.last_error as string | null) ?? null,
    lastErrorCode: (r.last_error_code as string | null) ?? null,
    targetLtxid: (r.target_ltxid as string | null) ?? null,
    createdAt: r.created_at as Date,
    updatedAt: r.updated_at as Date,
    extractedAt: (r.extracted_at as Date | null) ?? null,
    stagedAt: (r.staged_at as Date | null) ?? null,
    applyStartedAt: (r.apply_started_at as Date | null) ?? null,
    committedAt: (r.committed_at as Date | null) ?? null,
    failedAt: (r.failed_at as Date | null) ?? null,
  };
}

export class PostgresTransferJournal implements TransferJournal {
  constructor(private readonly pool: pg.Pool, private readonly opts: { ownsPool?: boolean } = {}) {}

  async insertBatch(b: NewBatch): Promise<BatchRecord> {
    const client = await this.pool.connect();
    try {
      await client.query('begin');
      const res = await client.query(
        `insert into keel.transfer_batches (batch_id, transfer_name, state, boundary_kind, boundary_low, boundary_high, schema_hash, schema_columns)
         values ($1, $2, 'extracting', $3, $4, $5, $6, $7::jsonb)
         on conflict do nothing
         returning ${COLUMNS}`,
        [b.batchId, b.transferName, b.boundaryKind, b.boundaryLow, b.boundaryHigh, b.schemaHash, JSON.stringify(b.schemaColumns)],
      );
      if (res.rowCount === 0) {
        await client.query('rollback');
        // Which rule refused it: read the committed state rather than parsing the error.
        const { open } = await this.lastForTransfer(b.transferName);
        if (open) throw new TransferError('open_batch_exists', `transfer ${b.transferName} already has an open batch ${open.batchId} (${open.state}); finish, reconcile or fail it first`, { batchId: open.batchId });
        throw new TransferError('window_taken', `transfer ${b.transferName}: a live batch already covers the window (${b.boundaryLow ?? '-inf'}, ${b.boundaryHigh}]`);
      }
      await client.query(
        `insert into keel.transfer_batch_events (batch_id, from_state, to_state, event, detail) values ($1, null, 'extracting', 'created', $2::jsonb)`,
        [b.batchId, JSON.stringify({ low: b.boundaryLow, high: b.boundaryHigh, schemaHash: b.schemaHash })],
      );
      await client.query('commit');
      return rowToBatch(res.rows[0]);
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  async lastForTransfer(transferName: string) {
    const open = await this.pool.query(
      `select ${COLUMNS} from keel.transfer_batches where transfer_name = $1 and state in ('extracting','staged','applying','unresolved') limit 1`,
      [transferName],
    );
    const last = await this.pool.query(
      `select ${COLUMNS} from keel.transfer_batches where transfer_name = $1 and state = 'committed' order by created_at desc, batch_id desc limit 1`,
      [transferName],
    );
    return { open: open.rows[0] ? rowToBatch(open.rows[0]) : null, lastCommitted: last.rows[0] ? rowToBatch(last.rows[0]) : null };
  }

  async get(batchId: string): Promise<BatchRecord | null> {
    const res = await this.pool.query(`select ${COLUMNS} from keel.transfer_batches where batch_id = $1`, [batchId]);
    return res.rows[0] ? rowToBatch(res.rows[0]) : null;
  }

  async list(f: BatchFilter): Promise<BatchRecord[]> {
    const res = await this.pool.query(
      `select ${COLUMNS} from keel.transfer_batches b
        where ($1::text is null or transfer_name = $1)
          and ($2::text is null or state = $2)
          and ($3::uuid is null or (created_at, batch_id) < (select created_at, batch_id from keel.transfer_batches where batch_id = $3))
        order by created_at desc, batch_id desc
        limit $4`,
      [f.transfer ?? null, f.state ?? null, f.afterId ?? null, Math.max(1, Math.min(f.limit, 1000))],
    );
    return res.rows.map(rowToBatch);
  }

  async events(batchId: string): Promise<BatchEvent[]> {
    const res = await this.pool.query(
      `select event_id, batch_id::text as batch_id, at, from_state, to_state, event, detail from keel.transfer_batch_events where batch_id = $1 order by event_id`,
      [batchId],
    );
    return res.rows.map((r) => ({
      eventId: Number(r.event_id),
      batchId: r.batch_id,
      at: r.at,
      fromState: r.from_state,
      toState: r.to_state,
      event: r.event,
      detail: r.detail,
    }));
  }

  async transition(batchId: string, from: readonly BatchState[], to: BatchState, patch: BatchPatch, event: string, detail?: Record<string, unknown>) {
    const sets: string[] = ['state = $3', 'updated_at = now()'];
    const params: unknown[] = [batchId, [...from], to];
    const add = (column: string, value: unknown) => {
      params.push(value);
      sets.push(`${column} = $${params.length}`);
    };
    if (patch.rowCount !== undefined) add('row_count', patch.rowCount);
    if (patch.checksum !== undefined) add('checksum', patch.checksum);
    if (patch.stagedCount !== undefined) add('staged_count', patch.stagedCount);
    if (patch.stagedChecksum !== undefined) add('staged_checksum', patch.stagedChecksum);
    if (patch.appliedCount !== undefined) add('applied_count', patch.appliedCount);
    if (patch.lastError !== undefined) add('last_error', patch.lastError);
    if (patch.lastErrorCode !== undefined) add('last_error_code', patch.lastErrorCode);
    if (patch.targetLtxid !== undefined) add('target_ltxid', patch.targetLtxid);
    if (patch.incrementAttempts) sets.push('attempts = attempts + 1');
    if (patch.stamp) {
      if (!STAMPS.has(patch.stamp)) throw new Error(`unknown stamp ${patch.stamp}`);
      sets.push(`${patch.stamp} = now()`); // from a fixed set, never from input
    }
    const client = await this.pool.connect();
    try {
      await client.query('begin');
      const prev = await client.query(`select state from keel.transfer_batches where batch_id = $1 for update`, [batchId]);
      const prevState = prev.rows[0]?.state as BatchState | undefined;
      if (!prevState || !from.includes(prevState)) {
        await client.query('rollback');
        return null;
      }
      const res = await client.query(`update keel.transfer_batches set ${sets.join(', ')} where batch_id = $1 and state = any($2::text[]) returning ${COLUMNS}`, params);
      await client.query(
        `insert into keel.transfer_batch_events (batch_id, from_state, to_state, event, detail) values ($1, $2, $3, $4, $5::jsonb)`,
        [batchId, prevState, to, event, JSON.stringify(detail ?? null)],
      );
      await client.query('commit');
      return rowToBatch(res.rows[0]);
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  async note(batchId: string, event: string, detail?: Record<string, unknown>, patch?: Pick<BatchPatch, 'lastError' | 'lastErrorCode' | 'targetLtxid'>) {
    await this.pool.query(
      `with u as (update keel.transfer_batches set
          last_error = case when $4 then $5 else last_error end,
          last_error_code = case when $6 then $7 else last_error_code end,
          target_ltxid = case when $8 then $9 else target_ltxid end,
          updated_at = case when $4 or $6 or $8 then now() else updated_at end
        where batch_id = $1 returning state)
       insert into keel.transfer_batch_events (batch_id, from_state, to_state, event, detail)
       select $1, u.state, u.state, $2, $3::jsonb from u`,
      [
        batchId, event, JSON.stringify(detail ?? null),
        patch?.lastError !== undefined, patch?.lastError ?? null,
        patch?.lastErrorCode !== undefined, patch?.lastErrorCode ?? null,
        patch?.targetLtxid !== undefined, patch?.targetLtxid ?? null,
      ],
    );
  }

  async stale(states: readonly BatchState[], olderThanMs: number, limit: number): Promise<BatchRecord[]> {
    const res = await this.pool.query(
      `select ${COLUMNS} from keel.transfer_batches
        where state = any($1::text[]) and updated_at < now() - make_interval(secs => $2::double precision / 1000)
        order by updated_at limit $3`,
      [[...states], olderThanMs, Math.max(1, Math.min(limit, 1000))],
    );
    return res.rows.map(rowToBatch);
  }

  async close(): Promise<void> {
    if (this.opts.ownsPool) await this.pool.end();
  }
}
