// Per-batch figures from a bench/transfer.ts result run with KEEL_BENCH_TIMELINE=1 (and KEEL_BENCH_CPU=1 for the CPU
// columns): usage `npx tsx bench/transferTimeline.ts result.json [cores]`. For every Keel run, medians over its batches
// of: the batch's wall time; the target's COPY; the window's sums after it; the serial wait from the sums' end to the
// next batch's COPY (commit, journal, claim: one process at a time); the server and Node CPU of the batch (samples
// whose interval ends inside it); and the idle core time, cores x wall - CPU (on a quiet machine: the time the
// batch left cores idle; under load also what other processes took).
import { readFileSync } from 'node:fs';

type Span = [string, number, number];
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)]! : NaN;
};
const r = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as { keel: Record<string, unknown>[] };
const cores = Number(process.argv[3] ?? 2);
for (const k of r.keel) {
  const tl = (k.timeline as Span[] | undefined) ?? [];
  const samples = (k.cpuSamples as [number, number, number][] | undefined) ?? [];
  const batches = tl.filter((s) => s[0].startsWith('batch ')).sort((a, b) => a[1] - b[1]);
  const copies = tl.filter((s) => s[0] === 'direct.copy').sort((a, b) => a[1] - b[1]);
  const sums = tl.filter((s) => s[0] === 'direct.checksum').sort((a, b) => a[1] - b[1]);
  const rows = batches.map((b, i) => {
    const within = (s: Span) => s[1] >= b[1] && s[2] <= b[2] + 0.05;
    const copy = copies.find(within);
    const sum = sums.find(within);
    const nextCopy = copies.find((c) => c[1] > b[2]);
    const cpu = samples.filter((s) => s[0] > b[1] && s[0] <= b[2]);
    const server = cpu.reduce((a, s) => a + s[1], 0);
    const node = cpu.reduce((a, s) => a + s[2], 0);
    const wall = b[2] - b[1];
    return {
      i: i + 1,
      wall,
      copy: copy ? copy[2] - copy[1] : NaN,
      sums: sum ? sum[2] - sum[1] : NaN,
      wait: sum && nextCopy ? nextCopy[1] - sum[2] : NaN,
      server,
      node,
      idle: cores * wall - server - node,
    };
  });
  const m = (f: (x: (typeof rows)[number]) => number) =>
    Math.round(median(rows.map(f).filter((x) => !Number.isNaN(x))));
  const total = (f: (x: (typeof rows)[number]) => number) => Math.round(rows.reduce((a, x) => a + f(x), 0));
  console.log(
    `${String(k.mode)} x${String(k.batches)}${k.readAhead === false ? ' (no read ahead)' : k.readAhead === 'afterCopy' ? ' (read ahead after the COPY)' : ''}: ${String(k.ms)} ms; per batch medians: wall ${m((x) => x.wall)}, COPY ${m((x) => x.copy)}, sums ${m((x) => x.sums)}, wait ${m((x) => x.wait)}, CPU server ${m((x) => x.server)} node ${m((x) => x.node)}, idle core ms ${m((x) => x.idle)}; totals: wall ${total((x) => x.wall)} CPU ${total((x) => x.server + x.node)} idle ${total((x) => x.idle)}${k.serverCpuMsByKind ? `; server CPU by kind ${JSON.stringify(k.serverCpuMsByKind)}` : ''}`,
  );
}
