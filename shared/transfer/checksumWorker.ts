// keel-v1 of streamed chunks on a worker thread (the row path's one source read, service.ts oneReadFeed). On the main
// thread, hashing a 5,000-row chunk (~6-9 ms) holds up reading the source's socket and writing the target's: the
// source's server then waits for Node (bench/README.md, runs 310-319). Here the main thread only packs a chunk's
// values into one string and their lengths (~1.3 ms), the worker hashes it meanwhile, and the chunks' sums are added
// when they come back (keel-v1's sum is order-independent). The row hash is the same code (checksum.ts
// ChecksumAccumulator, md5.ts), so the result is bit-identical.
//
// One worker per process, started on first use and unref'd while idle (it never keeps the process alive). This
// module is its own worker script: it is in every import graph that uses it (the app's package compiles exactly the
// modules its entry point imports, scripts/package.mjs), and it resolves under compiled JS (dist/.../*.js) and under
// TypeScript (tsx, vitest), where the worker loads it through tsx's loader.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { parentPort, Worker, workerData } from 'node:worker_threads';
import { ChecksumAccumulator, type CanonicalRow, type ChecksumSum } from './checksum.js';

// A chunk as it crosses to the worker: its non-null values concatenated, and per row its field count then each
// field's length (-1: NULL). A string and a transferred buffer: no structured clone of 5,000 arrays of strings.
interface Packed {
  id: number;
  text: string;
  lengths: ArrayBuffer;
}
type Reply = { id: number; sum: ChecksumSum } | { id: number; error: string };

const MARK = 'keel.checksumWorker';

function pack(id: number, rows: readonly CanonicalRow[]): { msg: Packed; transfer: ArrayBuffer[] } {
  let n = rows.length;
  for (const row of rows) n += row.length;
  const lengths = new Int32Array(n);
  let text = '';
  let k = 0;
  for (const row of rows) {
    lengths[k++] = row.length;
    for (let i = 0; i < row.length; i++) {
      const v = row[i];
      if (v === null || v === undefined) lengths[k++] = -1;
      else {
        text += v;
        lengths[k++] = v.length;
      }
    }
  }
  return { msg: { id, text, lengths: lengths.buffer }, transfer: [lengths.buffer] };
}

function hashPacked(m: Packed): ChecksumSum {
  const acc = new ChecksumAccumulator();
  const lengths = new Int32Array(m.lengths);
  const row: CanonicalRow = [];
  let pos = 0;
  for (let k = 0; k < lengths.length;) {
    const width = lengths[k++]!;
    row.length = width;
    for (let i = 0; i < width; i++) {
      const len = lengths[k++]!;
      if (len < 0) row[i] = null;
      else row[i] = m.text.slice(pos, (pos += len));
    }
    acc.add(row);
  }
  return acc.sum;
}

// In the worker: hash each packed chunk, answer its sum (or the error, which fails the chunk's run).
if (parentPort && (workerData as Record<string, unknown> | null)?.[MARK] === true) {
  const port = parentPort;
  port.on('message', (m: Packed) => {
    let reply: Reply;
    try {
      reply = { id: m.id, sum: hashPacked(m) };
    } catch (err) {
      reply = { id: m.id, error: err instanceof Error ? (err.stack ?? err.message) : String(err) };
    }
    port.postMessage(reply);
  });
}

interface Pending {
  resolve: (s: ChecksumSum) => void;
  reject: (e: Error) => void;
}

class HashThread {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  failed: Error | null = null;

  constructor(onGone: () => void) {
    const url = new URL(import.meta.url);
    // Under TypeScript (tsx, vitest) the worker needs tsx's loader for this file and its .js imports; compiled,
    // plain Node loads it.
    const ts = url.pathname.endsWith('.ts');
    this.worker = new Worker(url, {
      workerData: { [MARK]: true },
      ...(ts ? { execArgv: ['--import', pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href] } : {}),
    });
    this.worker.unref();
    const fail = (err: Error) => {
      this.failed ??= err;
      onGone();
      for (const p of this.pending.values()) p.reject(this.failed);
      this.pending.clear();
    };
    this.worker.on('message', (r: Reply) => {
      const p = this.pending.get(r.id);
      if (!p) return; // its run was abandoned
      this.settled(r.id);
      if ('error' in r) p.reject(new Error(`keel-v1 worker: ${r.error}`));
      else p.resolve(r.sum);
    });
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => fail(new Error(`keel-v1 worker exited (code ${code})`)));
  }

  hash(rows: readonly CanonicalRow[]): Promise<ChecksumSum> {
    if (this.failed) return Promise.reject(this.failed);
    const id = this.nextId++;
    const { msg, transfer } = pack(id, rows);
    const done = new Promise<ChecksumSum>((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref(); // a result is awaited: keep the process alive for it
      this.pending.set(id, { resolve, reject });
    });
    this.worker.postMessage(msg, transfer);
    return done;
  }

  private settled(id: number): void {
    if (this.pending.delete(id) && this.pending.size === 0) this.worker.unref();
  }

  terminate(): Promise<number> {
    return this.worker.terminate();
  }
}

let thread: HashThread | null = null;

function sharedThread(): HashThread {
  if (!thread || thread.failed) {
    const t: HashThread = new HashThread(() => {
      if (thread === t) thread = null; // the next run starts a new worker
    });
    thread = t;
  }
  return thread;
}

// Stops the worker (tests; a process exits without it: the worker is unref'd while idle).
export async function stopChecksumWorker(): Promise<void> {
  const t = thread;
  thread = null;
  await t?.terminate();
}

// keel-v1 of one stream of chunks, hashed on the worker. add() waits only when MAX_IN_FLIGHT chunks are still being
// hashed (bounded memory: at most that many packed chunks per stream); result() waits for the rest. A chunk that
// failed on the worker (or a worker that failed) rejects add() or result(), which fails the stream.
const MAX_IN_FLIGHT = 4;

export class WorkerChecksum {
  private readonly acc = new ChecksumAccumulator();
  private readonly inFlight = new Set<Promise<void>>();
  private error: Error | null = null;

  async add(rows: readonly CanonicalRow[]): Promise<void> {
    if (this.error) throw this.error;
    if (rows.length === 0) return;
    const done = sharedThread()
      .hash(rows)
      .then(
        (s) => this.acc.addSum(s),
        (e: Error) => {
          this.error ??= e;
        },
      )
      .finally(() => this.inFlight.delete(done));
    this.inFlight.add(done);
    while (this.inFlight.size >= MAX_IN_FLIGHT) await Promise.race(this.inFlight);
    if (this.error) throw this.error;
  }

  async result(): Promise<{ rowCount: number; checksum: string }> {
    await Promise.all(this.inFlight);
    if (this.error) throw this.error;
    return { rowCount: this.acc.count, checksum: this.acc.checksum };
  }
}
