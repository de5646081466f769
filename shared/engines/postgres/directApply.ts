// Direct apply of a PostgreSQL -> PostgreSQL key window (docs/transfer.md, "Direct apply"): the source's COPY stream
// goes straight into the business table inside ONE target transaction that claims the batch id, checks that the
// window was empty, verifies the written rows against the manifest (keel-pg2 on the target server; keel-v1 from the
// rows read back in the transaction, transferSql.ts pgReadBackSums) and writes the completion
// row. Instead of staging (one write) and then applying (a second write of every row), each row is written once.
// Nothing commits unless it matched the manifest; the claim and the completion row commit with the rows. When the
// window is not empty (rows of it already exist: a replay, a merge) or the written rows do not match the manifest,
// everything is rolled back and the answer is 'not_eligible': the service falls back to staging and applying.
// The row path (canonical rows, keel-v1: what a SQL Server source sends) takes the same transaction, its rows as COPY
// text; with one source read its manifest and attempt exist only after the rows, so the claim follows them
// (docs/transfer.md, "Direct apply of the row path").
import type pg from 'pg';
import { pipeline } from 'node:stream/promises';
import { Transform, type Writable } from 'node:stream';
import { once } from 'node:events';
import { algorithmOf, type LogicalType } from '../../transfer/checksum.js';
import { TransferError } from '../../transfer/errors.js';
import { quotePg } from '../../transfer/identifiers.js';
import type { MappedColumn } from '../../transfer/schema.js';
import { failFast } from '../../transfer/stagingTarget.js';
import type {
  ApplyResult,
  BulkStream,
  Manifest,
  RowFeed,
  RowsFeed,
  StageRequest,
  Window,
} from '../../transfer/types.js';
import {
  copyChunk,
  PG_CHECKSUM_SETTINGS_SQL,
  PG_ONE_PROCESS_SQL,
  pgChecksumQuery,
  pgReadBackSums,
} from './transferSql.js';
import { copyIn } from './copyStreams.js';

const KT_FENCED = 'KT005';
// From this many rows in the manifest the window's checksum is priced for parallel workers (below: one process).
const DIRECT_PARALLEL_ROWS = 10_000;
// The window's sums get one parallel worker per this many rows of the manifest (none below it; at most the server's
// max_parallel_workers_per_gather). A worker costs ~5 ms of server CPU to start (a fresh process: fork, backend
// start, cold caches; bench/README.md run 839) and a process hashes ~100k of these rows in ~50 ms: with a worker per
// 100k rows each process's share is >= ~10x its start, where two workers for a 100k window (the leader and each
// worker ~33k rows) spend ~10 ms of CPU to save ~15 ms of wall on a machine with three idle cores, and nothing on two.
export const DIRECT_ROWS_PER_WORKER = 100_000;
const noop = () => undefined;

export interface DirectApplyTarget {
  pool: pg.Pool;
  transfer: string;
  targetSchema: string | null;
  targetTable: string;
  qualified: string; // the quoted target table
  key: string; // the target column of the single integer key, which is also the window's boundary column
  mapped: MappedColumn[];
  targetTypes: Map<string, string>;
  stallMs: number;
  trace?: (phase: string, ms: number) => void;
}

function pgCode(err: unknown): string | undefined {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === 'string' ? c : undefined;
}

// When the claim is made: before the rows, with the manifest and the attempt the journal counts (a manifest read
// before the rows; count runs beside the transaction's begin, and null means the batch moved: nothing is claimed);
// or after them (one source read), when afterRows has recorded the manifest computed from them and counted the
// attempt.
export type DirectClaim =
  | { manifest: Manifest; count: () => Promise<number | null> }
  | { afterRows: () => Promise<{ manifest: Manifest; attempt: number }> };

export async function applyDirect(
  d: DirectApplyTarget,
  req: Pick<StageRequest, 'batchId' | 'transfer'>,
  w: Window,
  feed: RowFeed,
  when: DirectClaim,
  dataError: (err: unknown) => TransferError | null,
): Promise<ApplyResult | 'not_eligible' | 'not_counted'> {
  const client = await d.pool.connect();
  let lost: Error | undefined;
  const onError = (e: Error) => {
    lost ??= e;
  };
  client.on('error', onError);
  let broken: Error | undefined; // the connection is destroyed on release (an open COPY, or a connection in doubt)
  let countFailed: unknown; // the journal's error counting the attempt: nothing of this transaction happened
  let copyOpen = false;
  let opening: Promise<BulkStream> | undefined;
  let src: BulkStream | undefined;
  let rowsLeft: AsyncIterator<unknown> | undefined; // the row feed, until it ended (returned on any failure)
  let timer: NodeJS.Timeout | undefined;
  let mark = performance.now();
  const lap = (phase: string) => {
    const now = performance.now();
    d.trace?.(phase, now - mark);
    mark = now;
  };
  // The claim: null when this attempt holds the batch, else what to answer (nothing of this transaction commits).
  const claim = async (attempt: number): Promise<ApplyResult | 'not_eligible' | null> => {
    try {
      const c = (
        await client.query(
          `select state, row_count::text as row_count, checksum from keel_transfer.claim_batch($1, $2, $3::bigint)`,
          [req.batchId, req.transfer, attempt],
        )
      ).rows[0] as { state: string | null; row_count: string | null; checksum: string | null };
      if (c.state !== 'committed') return null;
      await client.query('rollback');
      return { outcome: 'already_committed', rowCount: Number(c.row_count), checksum: String(c.checksum) };
    } catch (err) {
      if (pgCode(err) === KT_FENCED) throw new TransferError('attempt_fenced', (err as Error).message, { attempt });
      throw err;
    }
  };
  // The manifest, when known before the rows ('count': read before them): the checks after the rows are priced by
  // its size (sumsPricing), and finish_direct goes out with the claim (below).
  const known = 'count' in when ? when.manifest : null;
  try {
    // begin and the settings in one simple query (none takes parameters): one round trip of wait fewer. With the
    // manifest known, the window's sums are priced here too, before the rows: transaction-local planner costs only
    // (a COPY plans nothing but the queries of the table's triggers, which these leave correct), and the statement
    // after the rows is then the sums alone.
    const opened = client.query(`begin; ${PG_CHECKSUM_SETTINGS_SQL}${known ? `; ${checkPricing(known)}` : ''}`);
    if ('count' in when) {
      // The journal counts the attempt while the transaction opens (nothing of the batch is touched by either): one
      // round trip of wait a batch fewer. Both answer before anything else: the claim needs the counted attempt.
      const [open, counted] = await Promise.allSettled([opened, when.count()]);
      if (counted.status === 'rejected') {
        // The journal's error, as the service's own call would have thrown it (never read as the target's).
        countFailed = counted.reason;
        if (open.status === 'rejected') broken = open.reason as Error;
        else await client.query('rollback').catch((e: Error) => (broken = e));
        throw countFailed;
      }
      if (counted.value === null) {
        // Someone else moved the batch: nothing of it is touched here, whatever the begin answered.
        if (open.status === 'rejected') broken = open.reason as Error;
        else await client.query('rollback').catch((e: Error) => (broken = e));
        return 'not_counted';
      }
      if (open.status === 'rejected') throw open.reason;
      const attempt = counted.value;
      let begun: { outcome: string; row_count: string | null; checksum: string | null };
      try {
        // finish_direct in the claim's statement, once claimed: it marks the completion row committed with the
        // manifest's count and checksum inside this transaction, which commits only when the rows' sums equal
        // exactly those (any difference, or any error, rolls it back with the rows), so what commits is unchanged;
        // the statement after the rows is then the sums alone (one round trip of wait a batch fewer after them).
        begun = (
          await client.query(
            `select outcome, row_count::text as row_count, checksum,
                    case when outcome = 'claimed' then keel_transfer.finish_direct($1, $9::bigint, $10) end as finished
               from keel_transfer.begin_direct($1, $2, $3, $4, $5, $6::bigint, $7::bigint, $8)`,
            [
              req.batchId,
              req.transfer,
              d.targetSchema,
              d.targetTable,
              d.key,
              w.low,
              w.high,
              attempt,
              when.manifest.rowCount,
              when.manifest.checksum,
            ],
          )
        ).rows[0];
      } catch (err) {
        if (pgCode(err) === KT_FENCED) throw new TransferError('attempt_fenced', (err as Error).message, { attempt });
        throw err;
      }
      if (begun.outcome !== 'claimed') {
        await client.query('rollback');
        if (begun.outcome === 'already_committed')
          return { outcome: 'already_committed', rowCount: Number(begun.row_count), checksum: String(begun.checksum) };
        return 'not_eligible';
      }
    } else {
      await opened;
      // One source read: the window's checks now, the claim once the rows have passed (it needs the attempt).
      const open = await client.query<{ open: boolean }>(
        `select keel_transfer.direct_window_open($1, $2, $3, $4, $5::bigint, $6::bigint) as open`,
        [req.batchId, d.targetSchema, d.targetTable, d.key, w.low, w.high],
      );
      if (!open.rows[0]!.open) {
        await client.query('rollback');
        if (feed.kind === 'rows') await feed.rows[Symbol.asyncIterator]().return?.().catch(noop);
        return 'not_eligible';
      }
    }
    lap('direct.claim');

    // Binary COPY when every column has the same declared type on both sides, as the staging does; canonical rows
    // as COPY text (what the row path's staging writes).
    const binary =
      feed.kind === 'bulk' &&
      d.mapped.every((c) => d.targetTypes.get(c.target)?.toLowerCase() === c.type.toLowerCase());
    const columnList = d.mapped.map((c) => quotePg(c.target)).join(', ');
    const sink = client.query(
      copyIn(`copy ${d.qualified} (${columnList}) from stdin${binary ? ' (format binary)' : ''}`),
    );
    copyOpen = true;
    sink.on('error', noop);
    const sinkFailed = new Promise<never>((_, reject) => sink.once('error', reject));
    sinkFailed.catch(noop);
    let stallFail: (e: Error) => void = noop;
    const stalled = new Promise<never>((_, reject) => (stallFail = reject));
    stalled.catch(noop);
    const touch = () => {
      clearTimeout(timer);
      timer = setTimeout(
        () =>
          stallFail(
            new TransferError(
              'stream_stalled',
              `batch ${req.batchId}: no data moved for ${d.stallMs} ms (source or target stopped answering)`,
            ),
          ),
        d.stallMs,
      );
    };
    touch();
    try {
      if (feed.kind === 'bulk') {
        opening = feed.open(binary ? 'binary' : 'text', true);
        src = await Promise.race([opening, sinkFailed, stalled]);
        src.stream.on('error', noop); // the pipeline reports it
        if (src.framed) sink.acceptFramed(); // the source's CopyData messages, written as they came
        touch();
        const moved = pipeline(
          src.stream,
          new Transform({ transform: (chunk, _enc, cb) => (touch(), cb(null, chunk)) }),
          sink,
        );
        moved.catch(noop);
        await Promise.race([moved, stalled]);
      } else {
        await writeRows(
          feed,
          d.mapped.map((c) => c.staged),
          sink,
          failFast([sinkFailed, stalled]),
          touch,
          (it) => {
            rowsLeft = it;
          },
          d.trace,
        );
        rowsLeft = undefined;
      }
    } catch (err) {
      if (pgCode(err) !== '23505' || lost) throw err;
      // A key of the window appeared meanwhile (committed by another writer), or the feed repeats a key: the COPY
      // ended with the server's error, the rollback undoes everything, and the staged way (whose merge handles
      // existing keys, and whose checks name duplicate keys) decides.
      copyOpen = false;
      clearTimeout(timer);
      rowsLeft?.return?.().catch(noop);
      rowsLeft = undefined;
      const s = src;
      src = undefined;
      await s?.release(err as Error).catch(noop);
      await client.query('rollback');
      return 'not_eligible';
    }
    copyOpen = false;
    clearTimeout(timer);
    const s = src;
    src = undefined;
    opening = undefined;
    // The source's read commits (its snapshot, nothing written; release never throws) beside the target's checks
    // instead of before them: one round trip of wait a batch fewer. Awaited before this returns.
    const sourceDone = s?.release();
    lap('direct.copy');
    let manifest: Manifest;
    if ('count' in when) manifest = when.manifest;
    else {
      // The journal records the manifest the service computed from these rows, then counts the attempt (durable
      // before the claim goes out, as before an apply); the claim then fences this transaction like any apply's.
      const counted = await when.afterRows();
      manifest = counted.manifest;
      lap('direct.journal');
      const claimed = await claim(counted.attempt);
      if (claimed) return claimed;
      lap('direct.claim');
    }

    // The window's rows on the target, checksummed by its server: exactly the manifest, or nothing commits. The
    // window was empty when claimed (begin_direct), so these are the rows just written, plus any a concurrent
    // writer committed into the window meanwhile (then the sums differ, and the staged way decides).
    // Planned in parallel where the window is large: the rows just written have no statistics yet (a fresh or
    // growing table that autovacuum has not analyzed), so the planner takes the range for ~0.5 % of the table and,
    // with the row hash priced like one plain operator per function, a single process (a 100k-row window: ~330 ms
    // on one process, ~160 ms on three, PostgreSQL 15). The hash's functions (the *_send calls, the record formed
    // and hashed) cost several times a comparison each; priced so (cpu_operator_cost 4x the server's), the
    // planner's own costs choose workers. Only this statement's transaction-local costs; the plan's shape (the
    // key's index, then the rows) stays the planner's.
    // finish_direct marks the completion row committed with the manifest's count and checksum: inside this
    // transaction, which commits only when the rows' sums below equal exactly those; otherwise the rollback undoes it
    // with everything else. With the manifest known before the rows, both went out before them (the pricing with
    // begin, finish_direct with the claim); after one source read, in one statement here.
    if (!known)
      await client.query(`${checkPricing(manifest)}, keel_transfer.finish_direct($1, $2, $3)`, [
        req.batchId,
        manifest.rowCount,
        manifest.checksum,
      ]);
    const keyRef = `t.${quotePg(d.key)}`;
    const cols = d.mapped.map((c) => ({
      ref: `t.${quotePg(c.target)}`,
      type: c.staged,
      declared: d.targetTypes.get(c.target),
    }));
    let rowCount: number;
    let checksum: string;
    if (algorithmOf(manifest.checksum) === 'keel-v1') {
      // keel-v1 (the row path): the window's stored rows read back in this transaction, after the write, and hashed
      // in Node (transferSql.ts, pgReadBackSums); the window travels in transaction-local settings (COPY has no bind
      // parameters).
      const high = `${keyRef} <= current_setting('keel.rb_high')::bigint`;
      ({ rowCount, checksum } = await pgReadBackSums(
        client,
        cols,
        `${d.qualified} t`,
        w.low === null ? high : `${keyRef} > current_setting('keel.rb_low')::bigint and ${high}`,
        { 'keel.rb_low': w.low, 'keel.rb_high': w.high },
      ));
    } else {
      const where = w.low === null ? `${keyRef} <= $1::bigint` : `${keyRef} > $2::bigint and ${keyRef} <= $1::bigint`;
      const sums = await client.query(
        pgChecksumQuery(cols, `${d.qualified} t`, where, algorithmOf(manifest.checksum)),
        w.low === null ? [w.high] : [w.high, w.low],
      );
      rowCount = Number(sums.rows[0].n);
      checksum = String(sums.rows[0].checksum);
    }
    lap('direct.checksum');
    if (rowCount !== manifest.rowCount || checksum !== manifest.checksum) {
      await client.query('rollback');
      await sourceDone;
      return 'not_eligible';
    }
    await client.query('commit');
    await sourceDone;
    lap('direct.commit');
    return { outcome: 'applied', rowCount, checksum };
  } catch (err) {
    clearTimeout(timer);
    // Ends the source's read (its own cleanup releases its connection); not awaited: a source that stopped
    // answering must not hold this.
    rowsLeft?.return?.().catch(noop);
    if (opening && !src) opening.then((s) => s.release(err as Error), noop).catch(noop);
    if (src) await src.release(err as Error).catch(noop);
    if (countFailed !== undefined && err === countFailed) throw err;
    if (copyOpen || lost || !(err instanceof TransferError)) {
      // An open COPY or a connection in doubt: destroying the connection ends the server's transaction at once
      // (a rollback could queue behind the COPY). Reconcile then reads the outcome from the completion row.
      broken = err as Error;
    } else {
      await client.query('rollback').catch((e: Error) => {
        broken = e;
      });
    }
    throw dataError(err) ?? err;
  } finally {
    if (!broken && !lost) client.off('error', onError);
    client.release(broken ?? lost);
  }
}

// The number of parallel workers the sums of a window of `rows` rows may start (DIRECT_ROWS_PER_WORKER), before the
// server's own cap.
export function sumsWorkers(rows: number): number {
  return Math.max(0, Math.floor(rows / DIRECT_ROWS_PER_WORKER));
}

// The window's sums priced (transaction-local settings; why: at the sums' statement in applyDirect), for a window of
// `rows` rows (the manifest's count): DIRECT_PARALLEL_ROWS or more are priced for parallel workers, and at most
// sumsWorkers(rows) of them are started. Text of constants only (the manifest's count as an integer literal, no
// input spliced): sent with begin in one simple query.
export function sumsPricing(rows: number): string {
  const large = rows >= DIRECT_PARALLEL_ROWS;
  const workers = sumsWorkers(rows);
  if (!Number.isSafeInteger(workers)) throw new Error(`sumsPricing: ${rows} rows`);
  return `select set_config('parallel_setup_cost', '0', true), set_config('parallel_tuple_cost', '0', true), set_config('min_parallel_table_scan_size', '0', true),
              set_config('min_parallel_index_scan_size', '0', true), set_config('work_mem', '32MB', true),
              set_config('cpu_operator_cost', (current_setting('cpu_operator_cost')::float8 * ${large ? 4 : 1})::text, true),
              set_config('max_parallel_workers_per_gather', least(current_setting('max_parallel_workers_per_gather')::int, ${workers})::text, true)`;
}

// The settings of the check after the rows, by the manifest's algorithm: keel-v1's read back runs on one process
// (Node hashes what it sends on the other core; workers would add their start and the rows' transfer to the leader),
// the server's sums are priced by the window's size (sumsPricing).
function checkPricing(manifest: Manifest): string {
  return algorithmOf(manifest.checksum) === 'keel-v1' ? PG_ONE_PROCESS_SQL : sumsPricing(manifest.rowCount);
}

// The feed's chunks as COPY text into the open COPY: every wait (the next chunk, the sink's drain) fails as soon as
// the COPY breaks or nothing moved for the stall time. `holding` gets the feed's iterator while it is read.
async function writeRows(
  feed: RowsFeed,
  types: LogicalType[],
  sink: Writable,
  guard: <T>(p: Promise<T>) => Promise<T>,
  touch: () => void,
  holding: (it: AsyncIterator<unknown>) => void,
  trace?: (phase: string, ms: number) => void,
): Promise<void> {
  const rows = feed.rows[Symbol.asyncIterator]();
  holding(rows);
  for (;;) {
    const asked = performance.now();
    const next = await guard(rows.next());
    if (next.done) {
      // The feed's end: the source's commit and the manifest's record in the journal (one source read).
      trace?.('direct.feedEnd', performance.now() - asked);
      break;
    }
    touch();
    if (!sink.write(copyChunk(next.value, types))) await guard(once(sink, 'drain'));
    touch();
  }
  const finished = new Promise<void>((resolve) => sink.once('finish', resolve));
  const fed = performance.now();
  sink.end();
  await guard(finished);
  // The target's backlog after the last row was handed on (its server parses and writes it alone meanwhile).
  trace?.('direct.drain', performance.now() - fed);
}
