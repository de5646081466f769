// COPY TO STDOUT streams that parse the server's messages without a Buffer per row, and a COPY FROM STDIN that writes
// CopyData messages as they came from a COPY TO (PostgreSQL -> PostgreSQL). Thin subclasses of pg-copy-streams' own
// (version pinned in package.json): its attach/detach to the pg connection, error, timeout and end handling stay as
// they are; only the parse of what the socket delivered, and the framing of what is written, change.
//
// Why: pg-copy-streams' COPY TO takes each CopyData message (one row) as its own Buffer, copies rows that straddle two
// socket reads, then copies every row once more into the chunk it pushes: most of the Node CPU a PG -> PG batch adds
// beside the COPY pipe (bench/README.md, run 1322). Here a socket read's whole CopyData messages are handed on as one
// slice of it (`framed`: headers included, for a COPY FROM to write unchanged) or their payloads copied once into one
// Buffer (`payload`: the COPY text or binary stream, what pg-copy-streams pushes); a message that straddles two reads
// is the only one copied on its own.
//
// A framed stream's chunks are whole CopyData messages only (a message cut by a socket read waits for its end), so a
// COPY FROM that fails after any chunk sends its CopyFail at a message boundary and the server sees the failure, never
// a row made of a message's start and the CopyFail's bytes.
import type { ReadableOptions, WritableOptions } from 'node:stream';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';

type CopyTo = ReturnType<typeof copyTo>;
type CopyFrom = ReturnType<typeof copyFrom>;

// pg-copy-streams' internals this file relies on (7.0.0): the unread-bytes list handed back to pg on detach, and the
// two steps that end a COPY TO's life on the connection.
interface CopyToInternals {
  _buffer: { push(b: Buffer): void };
  _detach(): void;
  _cleanup(): void;
}
interface CopyFromInternals {
  connection: { stream: { write(b: Buffer): boolean } };
}

const CopyToBase = copyTo('').constructor as new (text: string, options?: ReadableOptions) => CopyTo;
const CopyFromBase = copyFrom('').constructor as new (
  text: string,
  options?: WritableOptions,
) => CopyFrom & { flushChunk(chunk: Buffer): boolean };

const COPY_DATA = 0x64; // d
const ERROR_RESPONSE = 0x45; // E
// Interspersed messages a COPY OUT may carry (protocol-flow "COPY Operations"); CopyOutResponse opens it.
const SKIPPED = new Set([0x48 /* H */, 0x53 /* S */, 0x4e /* N */, 0x41 /* A */]);

const FRAMED: unique symbol = Symbol('keel.copyFramed');

export type CopyOutMode = 'framed' | 'payload';

class CopyOut extends CopyToBase {
  readonly [FRAMED]: boolean;
  private carry: Buffer[] = []; // a message cut by the end of a socket read
  private carryLen = 0;
  private over = false;

  constructor(text: string, mode: CopyOutMode, options?: ReadableOptions) {
    super(text, options);
    this[FRAMED] = mode === 'framed';
  }

  // Replaces pg-copy-streams' _parse: returns whether the consumer wants more (its push()'s answer).
  _parse(chunk: Buffer): boolean {
    if (this.over) return false;
    const pieces: Buffer[] = [];
    let pos = 0;
    if (this.carryLen > 0) {
      // Complete the cut message first: its 5-byte header (code, length), then its body.
      if (this.carryLen < 5) {
        const k = Math.min(5 - this.carryLen, chunk.length);
        this.carry.push(chunk.subarray(0, k));
        this.carryLen += k;
        pos = k;
        if (this.carryLen < 5) return true;
        this.carry = [Buffer.concat(this.carry, this.carryLen)];
      }
      const total = 1 + this.carry[0]!.readUInt32BE(1);
      const need = total - this.carryLen;
      if (chunk.length - pos < need) {
        this.carry.push(chunk.subarray(pos));
        this.carryLen += chunk.length - pos;
        return true;
      }
      this.carry.push(chunk.subarray(pos, pos + need));
      pos += need;
      const msg = Buffer.concat(this.carry, total);
      this.carry = [];
      this.carryLen = 0;
      const end = this.scan(msg, 0, pieces);
      if (end < 0) return this.finish(pieces, msg, -end - 1, chunk, pos);
    }
    const end = this.scan(chunk, pos, pieces);
    if (end < 0) return this.finish(pieces, chunk, -end - 1, null, 0);
    if (end < chunk.length) {
      this.carry = [chunk.subarray(end)];
      this.carryLen = chunk.length - end;
    }
    return this.emit_(pieces);
  }

  // Walks whole messages of b from pos: CopyData runs go to pieces, interspersed messages are skipped. Returns where
  // an incomplete message starts (b.length when none), or -(p + 1) for a message at p that ends the COPY.
  private scan(b: Buffer, pos: number, pieces: Buffer[]): number {
    const framed = this[FRAMED];
    const len = b.length;
    let run = pos; // start of the current run of CopyData messages
    let payload = 0;
    while (pos + 5 <= len) {
      const code = b[pos]!;
      const end = pos + 1 + (((b[pos + 1]! << 24) | (b[pos + 2]! << 16) | (b[pos + 3]! << 8) | b[pos + 4]!) >>> 0);
      if (code === COPY_DATA) {
        if (end > len) break;
        payload += end - pos - 5;
        pos = end;
        continue;
      }
      if (pos > run) pieces.push(framed ? b.subarray(run, pos) : unframe(b, run, pos, payload));
      payload = 0;
      // An ErrorResponse goes back to pg from its first byte; any other message is taken whole.
      if (end > len && code !== ERROR_RESPONSE) return pos;
      if (!SKIPPED.has(code)) return -(pos + 1);
      pos = end;
      run = pos;
    }
    if (pos > run) pieces.push(framed ? b.subarray(run, pos) : unframe(b, run, pos, payload));
    return pos;
  }

  // Not once the COPY has ended: what the socket holds then is pg's to read.
  override _read(size: number): void {
    if (!this.over) super._read(size);
  }

  private emit_(pieces: Buffer[]): boolean {
    let more = true;
    for (const p of pieces) more = this.push(p);
    return more;
  }

  // A message that ends the COPY at b[at]: an ErrorResponse goes back to pg unread (pg reports it through
  // handleError); CopyDone or anything else is consumed and the stream ends, what follows going back to pg (as
  // pg-copy-streams does).
  private finish(pieces: Buffer[], b: Buffer, at: number, next: Buffer | null, nextPos: number): boolean {
    this.over = true;
    this.emit_(pieces);
    const self = this as unknown as CopyToInternals;
    let from = at;
    const error = b[at] === ERROR_RESPONSE;
    if (!error) {
      // the message is whole here (scan found its code; a cut one is carried, never ended on)
      from = at + 1 + b.readUInt32BE(at + 1);
    }
    if (from < b.length) self._buffer.push(b.subarray(from));
    if (next && nextPos < next.length) self._buffer.push(next.subarray(nextPos));
    self._detach();
    if (!error) {
      this.push(null);
      self._cleanup();
    }
    return false;
  }
}

// The payloads of b's CopyData messages from start to end (payload bytes in all) in one Buffer.
function unframe(b: Buffer, start: number, end: number, payload: number): Buffer {
  const out = Buffer.allocUnsafe(payload);
  let o = 0;
  for (let pos = start; pos < end;) {
    const next = pos + 1 + (((b[pos + 1]! << 24) | (b[pos + 2]! << 16) | (b[pos + 3]! << 8) | b[pos + 4]!) >>> 0);
    o += b.copy(out, o, pos + 5, next);
    pos = next;
  }
  return out;
}

// COPY ... TO STDOUT as a readable stream: 'payload' chunks are the COPY's bytes (as pg-copy-streams' `to`), 'framed'
// chunks are whole CopyData messages for copyIn's sink to write as they are.
export function copyOut(text: string, mode: CopyOutMode = 'payload', options?: ReadableOptions): CopyTo {
  return new CopyOut(text, mode, options);
}

class CopyIn extends CopyFromBase {
  framed = false;

  // pg-copy-streams writes each chunk behind a CopyData header; a framed chunk already is CopyData messages.
  override flushChunk(chunk: Buffer): boolean {
    if (!this.framed) return super.flushChunk(chunk);
    return (this as unknown as CopyFromInternals).connection.stream.write(chunk);
  }
}

// COPY ... FROM STDIN as a writable stream (pg-copy-streams' `from`). acceptFramed(): the chunks written from now on
// are whole CopyData messages (a framed copyOut's), written as they are.
export function copyIn(text: string, options?: WritableOptions): CopyFrom & { acceptFramed(): void } {
  const sink = new CopyIn(text, options);
  return Object.assign(sink, {
    acceptFramed: () => {
      sink.framed = true;
    },
  });
}
