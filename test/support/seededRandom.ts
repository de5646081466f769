// Seeded randomness for chaos, race and fault tests: every run prints its seed, and KEEL_TEST_SEED replays it.
// mulberry32: tiny, fast and good enough to pick delays, victims and cut points; not for cryptography.

export interface SeededRandom {
  readonly seed: number;
  /** A float in [0, 1). */
  next(): number;
  /** An integer in [lo, hi], both ends included. */
  int(lo: number, hi: number): number;
  /** A new array with the items in random order (Fisher–Yates). */
  shuffle<T>(items: readonly T[]): T[];
  pick<T>(items: readonly T[]): T;
}

export function seedFromEnv(): number {
  const raw = process.env.KEEL_TEST_SEED;
  if (raw !== undefined && raw !== '') {
    const seed = Number(raw);
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
      throw new Error(`KEEL_TEST_SEED must be an integer from 0 to 4294967295, got ${JSON.stringify(raw)}`);
    }
    return seed;
  }
  return Math.floor(Math.random() * 0x100000000);
}

/** A generator for one test or suite; `label` names it in the printed replay line. */
export function seededRandom(label: string, seed = seedFromEnv()): SeededRandom {
  console.log(`[seed] ${label}: ${seed} (replay with KEEL_TEST_SEED=${seed})`);
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 0x100000000;
  };
  const int = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1));
  return {
    seed,
    next,
    int,
    shuffle<T>(items: readonly T[]): T[] {
      const out = [...items];
      for (let i = out.length - 1; i > 0; i--) {
        const j = int(0, i);
        [out[i], out[j]] = [out[j]!, out[i]!];
      }
      return out;
    },
    pick<T>(items: readonly T[]): T {
      if (items.length === 0) throw new Error('pick from an empty list');
      return items[int(0, items.length - 1)]!;
    },
  };
}
