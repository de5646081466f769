// NCRONTAB as the Functions host reads a timer schedule (NCrontab's CrontabSchedule with seconds), for every schedule
// Keel validates or fires: the local host's timers, the KEEL_*_SCHEDULE settings, a transfer's `schedule` and
// `keyCompareSchedule`, and defineSchedule's `cron`. One grammar and one day rule everywhere, so what runs locally is
// what Azure runs, and what Azure would refuse is refused here, naming the field:
// - six fields split on spaces: second minute hour day month day-of-week;
// - each field a comma list of `*`, `n`, `a-b` (a reversed range is swapped, as NCrontab does), each with an optional
//   `/step` (`n/step` runs from n to the field's maximum); month and day-of-week also take names by prefix, any case
//   (`Jan`, `mon`, `Thu`); values in range: 0-59, 0-59, 0-23, 1-31, 1-12, 0-6 (Sunday 0; `7` is refused);
// - no Quartz extensions (`?`, `L`, `W` after a number, `#`): NCrontab refuses them, so the host would not start;
// - a day matches only when both the day-of-month and the day-of-week fields match it ("0 0 9 1 * 1": 09:00 on a 1st
//   that is a Monday), not either one as in Vixie cron.
// Occurrences are wall-clock times in a time zone (IANA name; none: the process's local zone, as the Functions host
// uses WEBSITE_TIME_ZONE or UTC); a wall time that a DST change skips does not occur, one it repeats occurs once.

export class NcrontabError extends Error {
  constructor(
    readonly expression: string,
    readonly field: string | null,
    message: string,
  ) {
    super(message);
    this.name = 'NcrontabError';
  }
}

interface FieldSpec {
  name: string;
  min: number;
  max: number;
  names?: readonly string[];
}

const FIELDS: readonly FieldSpec[] = [
  { name: 'second', min: 0, max: 59 },
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day', min: 1, max: 31 },
  {
    name: 'month',
    min: 1,
    max: 12,
    names: [
      'January',
      'February',
      'March',
      'April',
      'May',
      'June',
      'July',
      'August',
      'September',
      'October',
      'November',
      'December',
    ],
  },
  {
    name: 'day-of-week',
    min: 0,
    max: 6,
    names: ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'],
  },
];

export const NCRONTAB_SHAPE = '"sec min hour day month day-of-week"';

function parseValue(text: string, f: FieldSpec, fail: (why: string) => never): number {
  if (text === '') fail('a value is empty');
  if (/^[0-9]/.test(text)) {
    if (!/^[0-9]+$/.test(text)) fail(`"${text}" is not a number`);
    return Number(text);
  }
  const lower = text.toLowerCase();
  const i = f.names?.findIndex((n) => n.toLowerCase().startsWith(lower)) ?? -1;
  if (i < 0)
    fail(
      f.names
        ? `"${text}" is neither a number nor a ${f.name} name (${f.names.map((n) => n.slice(0, 3)).join(', ')})`
        : `"${text}" is not a number from ${f.min} to ${f.max}`,
    );
  return i + f.min;
}

function parseField(text: string, f: FieldSpec, fail: (why: string) => never): boolean[] {
  const set: boolean[] = new Array<boolean>(f.max + 1).fill(false);
  const inRange = (v: number) => {
    if (v < f.min || v > f.max) fail(`${v} is outside ${f.min}-${f.max}`);
  };
  for (const part of text.split(',')) {
    let body = part;
    let step = 1;
    const slash = part.indexOf('/');
    if (slash >= 0) {
      const s = part.slice(slash + 1);
      if (slash === 0 || !/^[0-9]+$/.test(s)) fail(`"${part}": a step is "/<number>" after a value, a range or *`);
      step = Math.max(1, Number(s));
      body = part.slice(0, slash);
    }
    let lo: number;
    let hi: number;
    if (body === '*') [lo, hi] = [f.min, f.max];
    else {
      const dash = body.indexOf('-', 1);
      if (dash > 0) {
        lo = parseValue(body.slice(0, dash), f, fail);
        hi = parseValue(body.slice(dash + 1), f, fail);
        if (lo > hi) [lo, hi] = [hi, lo];
        inRange(lo);
        inRange(hi);
      } else {
        lo = parseValue(body, f, fail);
        inRange(lo);
        hi = slash >= 0 ? f.max : lo;
      }
    }
    for (let v = lo; v <= hi; v += step) set[v] = true;
  }
  return set;
}

interface Wall {
  y: number;
  mo: number; // 1-12
  d: number;
  h: number;
  mi: number;
  s: number;
}

const formatters = new Map<string, Intl.DateTimeFormat>();
function formatterOf(timeZone: string): Intl.DateTimeFormat {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(timeZone, f);
  }
  return f;
}

function wallOf(t: number, timeZone: string | undefined): Wall {
  if (timeZone === undefined) {
    const d = new Date(t);
    return {
      y: d.getFullYear(),
      mo: d.getMonth() + 1,
      d: d.getDate(),
      h: d.getHours(),
      mi: d.getMinutes(),
      s: d.getSeconds(),
    };
  }
  if (timeZone === 'UTC') {
    const d = new Date(t);
    return {
      y: d.getUTCFullYear(),
      mo: d.getUTCMonth() + 1,
      d: d.getUTCDate(),
      h: d.getUTCHours(),
      mi: d.getUTCMinutes(),
      s: d.getUTCSeconds(),
    };
  }
  const p: Record<string, number> = {};
  for (const part of formatterOf(timeZone).formatToParts(new Date(t)))
    if (part.type !== 'literal') p[part.type] = Number(part.value);
  return { y: p.year!, mo: p.month!, d: p.day!, h: p.hour! % 24, mi: p.minute!, s: p.second! };
}

const naive = (w: Wall) => Date.UTC(w.y, w.mo - 1, w.d, w.h, w.mi, w.s);
const sameWall = (a: Wall, b: Wall) =>
  a.y === b.y && a.mo === b.mo && a.d === b.d && a.h === b.h && a.mi === b.mi && a.s === b.s;

// The instant a wall time is in the zone, or null when the zone skips it (DST forward). A repeated wall time (DST
// back) is its first instant.
function instantOf(w: Wall, timeZone: string | undefined): number | null {
  let t: number;
  if (timeZone === undefined) t = new Date(w.y, w.mo - 1, w.d, w.h, w.mi, w.s).getTime();
  else if (timeZone === 'UTC') return naive(w);
  else {
    const n = naive(w);
    const offsetAt = (x: number) => naive(wallOf(x, timeZone)) - x;
    // The earlier of the candidate offsets first: the first instant of a repeated hour.
    const candidates = [n - offsetAt(n - 86_400_000), n - offsetAt(n + 86_400_000), n - offsetAt(n)].sort(
      (a, b) => a - b,
    );
    const hit = candidates.find((c) => sameWall(wallOf(c, timeZone), w));
    return hit ?? null;
  }
  return sameWall(wallOf(t, timeZone), w) ? t : null;
}

const daysIn = (y: number, mo: number) => new Date(Date.UTC(y, mo, 0)).getUTCDate();
const dowOf = (y: number, mo: number, d: number) => new Date(Date.UTC(y, mo - 1, d)).getUTCDay();

// How far a search looks (a day-of-month and day-of-week pair such as Feb 29 on a Monday recurs in 28 years).
const SEARCH_YEARS = 100;

export class Ncrontab {
  private readonly sets: boolean[][];
  private readonly lists: number[][];

  constructor(
    readonly expression: string,
    readonly timeZone?: string,
  ) {
    const fail = (field: string | null) => (why: string) => {
      throw new NcrontabError(
        expression,
        field,
        `"${expression}" is not an NCRONTAB expression${field ? ` (${field} field)` : ''}: ${why}`,
      );
    };
    const tokens = expression.split(' ').filter((t) => t !== '');
    if (tokens.length !== 6)
      fail(null)(`it has ${tokens.length} fields, NCRONTAB with seconds has 6: ${NCRONTAB_SHAPE}`);
    this.sets = tokens.map((t, i) => parseField(t, FIELDS[i]!, fail(FIELDS[i]!.name)));
    this.lists = this.sets.map((s) => s.flatMap((on, v) => (on ? [v] : [])));
    if (timeZone !== undefined) {
      try {
        formatterOf(timeZone);
      } catch {
        throw new NcrontabError(expression, null, `"${timeZone}" is not an IANA time zone`);
      }
    }
  }

  private dayMatches(y: number, mo: number, d: number): boolean {
    return d <= daysIn(y, mo) && this.sets[3]![d]! && this.sets[5]![dowOf(y, mo, d)]!;
  }

  // The first time of day at or after (h, mi, s) (forward), or the last at or before it (backward).
  private timeIn(h0: number, mi0: number, s0: number, forward: boolean): [number, number, number] | null {
    const [secs, mins, hours] = [this.lists[0]!, this.lists[1]!, this.lists[2]!];
    const pick = (list: number[], bound: number) =>
      forward ? list.find((v) => v >= bound) : [...list].reverse().find((v) => v <= bound);
    for (let h = pick(hours, h0); h !== undefined; h = pick(hours, forward ? h + 1 : h - 1)) {
      const mStart = h === h0 ? mi0 : forward ? 0 : 59;
      for (let mi = pick(mins, mStart); mi !== undefined; mi = pick(mins, forward ? mi + 1 : mi - 1)) {
        const s = pick(secs, h === h0 && mi === mi0 ? s0 : forward ? 0 : 59);
        if (s !== undefined) return [h, mi, s];
      }
    }
    return null;
  }

  // The occurrence nearest to wall `from` (inclusive) in the direction, as an instant passing `ok`.
  private search(from: Wall, forward: boolean, ok: (t: number) => boolean): Date | null {
    let { y, mo, d } = from;
    let [h, mi, s] = [from.h, from.mi, from.s];
    const step = forward ? 1 : -1;
    for (let months = 0; months < SEARCH_YEARS * 12;) {
      if (!this.sets[4]![mo]!) {
        // Not a month of the schedule: its first (forward) or last (backward) day, next month.
        mo += step;
        if (mo > 12) [mo, y] = [1, y + 1];
        if (mo < 1) [mo, y] = [12, y - 1];
        d = forward ? 1 : daysIn(y, mo);
        [h, mi, s] = forward ? [0, 0, 0] : [23, 59, 59];
        months++;
        continue;
      }
      if (d >= 1 && d <= daysIn(y, mo) && this.dayMatches(y, mo, d)) {
        let at = this.timeIn(h, mi, s, forward);
        while (at) {
          const w = { y, mo, d, h: at[0], mi: at[1], s: at[2] };
          const t = instantOf(w, this.timeZone);
          if (t !== null && ok(t)) return new Date(t);
          // Skipped by DST or not past the bound: the next time of this day.
          const n = naive(w) + step * 1000;
          const nw = new Date(n);
          if (nw.getUTCDate() !== d) break;
          at = this.timeIn(nw.getUTCHours(), nw.getUTCMinutes(), nw.getUTCSeconds(), forward);
        }
      }
      d += step;
      [h, mi, s] = forward ? [0, 0, 0] : [23, 59, 59];
      if (d > daysIn(y, mo) || d < 1) {
        mo += step;
        if (mo > 12) [mo, y] = [1, y + 1];
        if (mo < 1) [mo, y] = [12, y - 1];
        d = forward ? 1 : daysIn(y, mo);
        months++;
      }
    }
    return null;
  }

  // The first occurrence strictly after `after` (whole seconds, as NCrontab: from the next second on); null if none
  // within a century (e.g. "0 0 0 30 2 *").
  next(after: Date = new Date()): Date | null {
    const bound = after.getTime();
    const from = wallOf(Math.floor(bound / 1000) * 1000 + 1000, this.timeZone);
    return this.search(from, true, (t) => t > bound);
  }

  // The latest occurrence strictly before `before`.
  previous(before: Date = new Date()): Date | null {
    const bound = before.getTime();
    const from = wallOf(Math.ceil(bound / 1000) * 1000 - 1000, this.timeZone);
    return this.search(from, false, (t) => t < bound);
  }

  nextN(n: number, after: Date = new Date()): Date[] {
    const out: Date[] = [];
    for (let t = this.next(after); t && out.length < n; t = this.next(t)) out.push(t);
    return out;
  }

  previousN(n: number, before: Date = new Date()): Date[] {
    const out: Date[] = [];
    for (let t = this.previous(before); t && out.length < n; t = this.previous(t)) out.push(t);
    return out;
  }
}

// Parses (and so validates) an expression; throws NcrontabError naming the field at fault.
export function ncrontab(expression: string, timeZone?: string): Ncrontab {
  return new Ncrontab(expression, timeZone);
}

// Why an expression is refused, or null when Azure would take it (for zod refinements and settings).
export function ncrontabProblem(expression: string): string | null {
  try {
    new Ncrontab(expression);
    return null;
  } catch (err) {
    return (err as Error).message;
  }
}
