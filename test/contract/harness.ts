// What the shared contract suite needs from an engine beyond the JobStore interface: direct table access to
// arrange time-based scenarios and to check invariants. Each engine implements it in test/engines/<engine>.harness.ts.
import type { JobStore, JobId } from '../../shared/jobs/contract.js';

export type PillarTable = 'hot' | 'archive' | 'dlq';

export interface StatsRow {
  succeeded: number;
  failed: number;
  retried: number;
  cancelled: number;
  zombie: number;
  resurrected: number;
}

// What stats() must equal, counted from the rows themselves (every row read).
export interface HotTruth {
  pending: number;
  due: number;
  fetched: number;
  processing: number;
  dlq: number;
}

export interface BucketTotals {
  count: number;
  totalDurationMs: number;
}

export interface EngineHarness {
  readonly engine: string;
  // A fresh, migrated, empty database and a store over it (pool sized for races).
  createStore(opts?: { poolSize?: number }): Promise<JobStore>;
  // Row counts per pillar, optionally for one queue.
  countRows(table: PillarTable, queue?: string): Promise<number>;
  // Ids present in a pillar (for exactly-one-place checks).
  ids(table: PillarTable): Promise<JobId[]>;
  statsRow(queue: string): Promise<StatsRow>;
  // Pending, due, fetched, processing (hot) and DLQ rows of a queue, counted from the tables.
  hotTruth(queue: string): Promise<HotTruth>;
  // Sum of metric buckets for a queue/outcome (optionally one reason).
  bucketTotals(queue: string, outcome: 'succeeded' | 'failed', reason?: string): Promise<BucketTotals>;
  // Move a hot job's time fields into the past, to make it due, a zombie or expired.
  backdate(
    jobId: JobId,
    field: 'run_at' | 'lease_expires_at' | 'heartbeat_at' | 'expires_at' | 'started_at',
    secondsAgo: number,
  ): Promise<void>;
  // Backdate archive finished_at / dlq failed_at / metric buckets (for purge tests).
  backdateFinished(table: 'archive' | 'dlq' | 'metrics', secondsAgo: number): Promise<void>;
  // Move ops audit rows' recording time into the past (for the audit retention purge).
  backdateAudit(ids: string[], secondsAgo: number): Promise<void>;
  // Make inserts into the destination table fail (trigger), and undo it.
  breakInserts(table: 'archive' | 'dlq' | 'hot'): Promise<void>;
  restoreInserts(table: 'archive' | 'dlq' | 'hot'): Promise<void>;
  // Terminate every server session of the store's database except the harness's own (a crash of all workers).
  killStoreConnections(): Promise<void>;
  // Engines that can count them: the deadlocks in the store's database since it was created, one description per
  // finding (empty: none). Call it after the stores under test are closed, so their sessions' counters are final.
  deadlocks?(): Promise<string[]>;
  close(): Promise<void>;
}
