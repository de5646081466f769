// Seeded randomness for fault and race tests: every run prints its seed, and KEEL_TEST_SEED=<seed> replays it.
// (Replays draw the same plans; timing on a shared machine still varies, so a replay is close, not identical.)
export interface Rng {
  seed: number;
  next(): number; // [0, 1)
  int(lo: number, hi: number): number; // lo..hi inclusive
  chance(p: number): boolean;
  pick<T>(items: readonly T[]): T;
  fork(label: string): Rng; // an independent stream (e.g. one per concurrent lane), same seed -> same streams
}

function mulberry32(a: number): () => number {
  return () => {
    a |= 0;
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

function make(seed: number): Rng {
  const next = mulberry32(seed);
  const rng: Rng = {
    seed,
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    chance: (p) => next() < p,
    pick: (items) => items[Math.floor(next() * items.length)]!,
    fork: (label) => make((seed ^ hash(label)) >>> 0),
  };
  return rng;
}

export function seededRng(suite: string): Rng {
  const raw = process.env.KEEL_TEST_SEED;
  const seed = raw !== undefined && raw !== '' ? Number(raw) >>> 0 : Math.floor(Math.random() * 2 ** 31);
  console.log(`[${suite}] seed ${seed} (replay with KEEL_TEST_SEED=${seed})`);
  return make(seed).fork(suite);
}
