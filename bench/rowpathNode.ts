// Node's CPU a row on the row path without a server (issue 26, bench/README.md runs 1000-1019): 1M rows of the
// transfer bench's shape as the PostgreSQL source's canonical COPY text in 5,000-row chunks, each split into rows as
// transferSource.ts does, written as the target's COPY text (copyChunk) and hashed with keel-v1 as the one-read feed
// does (service.ts oneReadFeed). Prints process CPU ms per 1M rows by phase, four repetitions, and the checksum.
//   npx tsx bench/rowpathNode.ts
// Comparable between commits: copy it into another worktree (before ChecksumAccumulator.expect it hashes each row).
import { ChecksumAccumulator, type CanonicalRow } from '../shared/transfer/checksum.js';
import { copyChunk } from '../shared/engines/postgres/transferSql.js';
import { copyTextValue } from '../shared/engines/postgres/transferSource.js';

const N = 1_000_000;
const CHUNK = 5000;
const pad = (n: number, w: number) => String(n).padStart(w, '0');
// A row of bench/transfer.ts ORDERS_FILL as its canonical COPY text.
function line(n: number): string {
  const d = new Date(Date.UTC(2026, 0, 1) + n * 1000);
  const ts = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1, 2)}-${pad(d.getUTCDate(), 2)}T${pad(d.getUTCHours(), 2)}:${pad(d.getUTCMinutes(), 2)}:${pad(d.getUTCSeconds(), 2)}.000000Z`;
  const amount = (((n % 100000) * 137) / 100).toFixed(2).replace(/\.?0+$/, '');
  const note = n % 7 === 0 ? '\\N' : `order note ${n}`;
  return [String(n), `customer-${n % 9973}`, amount, ts, n % 2 === 0 ? 't' : 'f', note].join('\t');
}
const texts: Buffer[] = [];
for (let c = 0; c < N; c += CHUNK) {
  const lines: string[] = [];
  for (let n = c + 1; n <= c + CHUNK; n++) lines.push(line(n));
  texts.push(Buffer.from(`${lines.join('\n')}\n`));
}
const types = ['int', 'text', 'decimal', 'timestamptz', 'bool', 'text'] as const;

// transferSource.ts streamRows' split (its `take`).
function split(text: string): CanonicalRow[] {
  const rows: CanonicalRow[] = [];
  for (const l of text.split('\n')) {
    const row: CanonicalRow = l.split('\t');
    if (l.includes('\\')) for (let i = 0; i < row.length; i++) row[i] = copyTextValue(row[i]!);
    if (row.length !== types.length) throw new Error('width');
    rows.push(row);
  }
  return rows;
}

const cpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const written: (string | Buffer)[] = []; // the last few chunks' COPY text stay alive, as on the socket
for (let rep = 0; rep < 4; rep++) {
  const start = cpu();
  let splitMs = 0;
  let copyMs = 0;
  let hashMs = 0;
  const acc = new ChecksumAccumulator();
  for (const b of texts) {
    let t = cpu();
    const chunk = split(b.toString('utf8', 0, b.length - 1));
    splitMs += cpu() - t;
    t = cpu();
    if ('expect' in acc) acc.expect(chunk);
    const text = copyChunk(chunk, types);
    written.push(typeof text === 'string' ? Buffer.from(text) : text);
    if (written.length > 3) written.shift();
    copyMs += cpu() - t;
    t = cpu();
    if ('addChunk' in acc) acc.addChunk(chunk);
    else for (const row of chunk) (acc as ChecksumAccumulator).add(row);
    hashMs += cpu() - t;
  }
  console.log(
    `CPU ms per 1M rows: total ${(cpu() - start).toFixed(0)}, split ${splitMs.toFixed(0)}, copy text ${copyMs.toFixed(0)}, hash after ${hashMs.toFixed(0)}; keel-v1 ${acc.checksum}`,
  );
}
