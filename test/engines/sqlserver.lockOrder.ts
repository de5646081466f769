// A static check of the SQL Server procedure bodies against the one lock order (docs/sqlserver.md, "Lock order";
// sql/README.md). There is no SQL Server here, so deadlocks cannot be provoked; what can be checked is the shape every
// body must have for the order to hold:
//
//  1. Counters last, once: a procedure that creates #KeelCountDeltas calls keel.ApplyCounters exactly once between
//     BEGIN TRANSACTION and every COMMIT on every path, after every counted statement (DML on keel.JobsHot or
//     keel.JobsDLQ, whose triggers record read-counter deltas, or an EXEC of a procedure that runs such DML in the
//     caller's transaction); no counted statement runs outside its transaction or before the table exists; no RETURN
//     leaves a transaction open.
//  2. A procedure without #KeelCountDeltas has at most one counted statement on any path (its trigger writes the read
//     counters at the end of that statement, which must be the only one), and never calls keel.ApplyCounters or
//     keel.DeadLetter (both refuse to run without the table).
//  3. Only keel.ApplyCounters and the two counter triggers write HotCounts, DlqCounts, StatsSummary or MetricBuckets
//     (plus an explicit, reasoned allow-list); ApplyCounters writes them in the order HotCounts -> DlqCounts ->
//     StatsSummary -> MetricBuckets; each trigger defers to #KeelCountDeltas (and returns) before its own write.
//  4. A table variable joined to itself (a self-join or a correlated subquery) has an index leading with the join
//     column: a table variable has no statistics, and a plan cached for one row would otherwise scan it per row
//     (review F4).
//
// Text level, not a full parser (Microsoft's ScriptDom runs in `npm run check:sql`, needs .NET and knows nothing of
// these rules): comments and string literals are tokenised away, batches split on GO lines, and each module body is
// parsed into its control flow (BEGIN...END, IF/ELSE, WHILE, BEGIN TRY/CATCH) with every other statement ending at its
// semicolon. The scripts terminate every statement with ';' (ScriptDom accepts either); this check requires it and
// refuses to guess a statement boundary, so a missing ';' fails the check instead of hiding a statement. Paths are
// explored without evaluating conditions (both branches of every IF, a WHILE body zero or more times), which can
// only over-report: a procedure whose ApplyCounters runs under a condition fails even when the condition always
// holds, and that is the point.

export interface Token {
  text: string; // identifiers without brackets; string literals without quotes
  upper: string;
  kind: 'word' | 'string' | 'punct';
  line: number;
}

export type Stmt =
  | { kind: 'simple'; tokens: Token[]; line: number }
  | { kind: 'block'; body: Stmt[]; line: number }
  | { kind: 'if'; cond: Token[]; then: Stmt; else?: Stmt; line: number }
  | { kind: 'while'; cond: Token[]; body: Stmt; line: number }
  | { kind: 'try'; body: Stmt[]; handler: Stmt[]; line: number };

export interface Module {
  kind: 'procedure' | 'trigger';
  name: string; // lower case, schema-qualified as written: 'keel.applycounters'
  display: string; // as written
  file: string;
  line: number;
  body: Stmt[];
  tokens: Token[]; // the whole body, for declarations
}

export class TsqlShapeError extends Error {}

export const COUNTER_TABLES = ['hotcounts', 'dlqcounts', 'statssummary', 'metricbuckets'] as const;
const COUNTED_TABLES = new Set(['jobshot', 'jobsdlq']);
const APPLY_COUNTERS = 'keel.applycounters';
const DEAD_LETTER = 'keel.deadletter';
// Procedures that run only inside their caller's transaction, with its #KeelCountDeltas, and leave the counters to
// it: keel.DeadLetter (every Hot -> DLQ move) and keel.FlowSettle (a flow's children, V007). Both have DeadLetter's
// shape (deadLetterShape).
const IN_CALLER_TRANSACTION = new Set([DEAD_LETTER, 'keel.flowsettle']);
const DELTAS_TABLE = '#keelcountdeltas';
const COUNTER_TRIGGERS = new Set(['keel.jobshot_counted', 'keel.jobsdlq_counted']);

// Counter-table writes outside ApplyCounters and the triggers that cannot take part in a cycle, with the reason.
export const COUNTER_WRITE_ALLOWED: ReadonlyArray<{ module: string; table: string; why: string }> = [
  {
    module: 'keel.purge',
    table: 'metricbuckets',
    why:
      'retention: deletes buckets older than @OlderThan (never the current minute ApplyCounters writes), READPAST, ' +
      'one statement in its own autocommit transaction that touches no other table',
  },
];

export function tokenize(text: string, firstLine = 1): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  let line = firstLine;
  const push = (t: string, kind: Token['kind'], at: number) =>
    tokens.push({ text: t, upper: t.toUpperCase(), kind, line: at });
  while (i < text.length) {
    const c = text[i]!;
    if (c === '\n') {
      line++;
      i++;
    } else if (/\s/.test(c)) {
      i++;
    } else if (c === '-' && text[i + 1] === '-') {
      while (i < text.length && text[i] !== '\n') i++;
    } else if (c === '/' && text[i + 1] === '*') {
      let depth = 0;
      do {
        if (text[i] === '/' && text[i + 1] === '*') {
          depth++;
          i += 2;
        } else if (text[i] === '*' && text[i + 1] === '/') {
          depth--;
          i += 2;
        } else {
          if (text[i] === '\n') line++;
          i++;
        }
      } while (depth > 0 && i < text.length);
    } else if (c === "'" || ((c === 'N' || c === 'n') && text[i + 1] === "'")) {
      const at = line;
      i += c === "'" ? 1 : 2;
      let s = '';
      for (;;) {
        if (i >= text.length) throw new TsqlShapeError(`line ${at}: unterminated string literal`);
        if (text[i] === "'" && text[i + 1] === "'") {
          s += "'";
          i += 2;
        } else if (text[i] === "'") {
          i++;
          break;
        } else {
          if (text[i] === '\n') line++;
          s += text[i++];
        }
      }
      push(s, 'string', at);
    } else if (/[A-Za-z0-9_@#$.[\]"]/.test(c)) {
      // An identifier or number, dotted parts and [bracketed] / "quoted" parts joined: keel.[JobsHot] -> keel.JobsHot.
      let s = '';
      while (i < text.length) {
        const d = text[i]!;
        if (d === '[' || d === '"') {
          const close = d === '[' ? ']' : '"';
          i++;
          while (i < text.length && !(text[i] === close && text[i + 1] !== close)) {
            if (text[i] === close) i++; // ]] or "" escape
            s += text[i++];
          }
          i++;
        } else if (/[A-Za-z0-9_@#$.]/.test(d)) {
          s += d;
          i++;
        } else break;
      }
      push(s, 'word', line);
    } else {
      push(c, 'punct', line);
      i++;
    }
  }
  return tokens;
}

// Statement-start keywords: where an IF/WHILE condition ends, and where a statement without ';' would be detected.
const STATEMENT_START = new Set([
  'BEGIN', 'SELECT', 'INSERT', 'UPDATE', 'DELETE', 'SET', 'EXEC', 'EXECUTE', 'IF', 'WHILE', 'RETURN', 'THROW',
  'DECLARE', 'COMMIT', 'ROLLBACK', 'WITH', 'CREATE', 'DROP', 'TRUNCATE', 'MERGE', 'PRINT', 'RAISERROR', 'BREAK',
  'CONTINUE', 'WAITFOR', 'GOTO', 'SAVE',
]); // prettier-ignore
// Tokens that can never be inside a simple statement at nesting depth 0: meeting one means a ';' is missing.
const NEVER_INSIDE = new Set([
  'IF', 'WHILE', 'ELSE', 'BEGIN', 'DECLARE', 'RETURN', 'THROW', 'COMMIT', 'ROLLBACK', 'CREATE', 'BREAK', 'CONTINUE',
]); // prettier-ignore

class Parser {
  private i = 0;
  constructor(
    private readonly t: Token[],
    private readonly where: string,
  ) {}

  private peek(k = 0): Token | undefined {
    return this.t[this.i + k];
  }
  private fail(msg: string, tok = this.peek()): never {
    throw new TsqlShapeError(`${this.where}:${tok?.line ?? '?'}: ${msg}`);
  }
  private expect(word: string): Token {
    const tok = this.peek();
    if (tok?.upper !== word) this.fail(`expected ${word}, found ${tok ? tok.text : 'end of batch'}`);
    this.i++;
    return tok;
  }
  private skipSemicolons(): void {
    while (this.peek()?.text === ';') this.i++;
  }
  done(): boolean {
    this.skipSemicolons();
    return this.i >= this.t.length;
  }

  // Statements until END (of a block, TRY or CATCH) or the end of the batch.
  list(): Stmt[] {
    const out: Stmt[] = [];
    for (;;) {
      this.skipSemicolons();
      const tok = this.peek();
      if (!tok || tok.upper === 'END') return out;
      out.push(this.statement());
    }
  }

  statement(): Stmt {
    this.skipSemicolons();
    const tok = this.peek();
    if (!tok) this.fail('expected a statement');
    const line = tok.line;
    if (tok.upper === 'BEGIN') {
      const next = this.peek(1)?.upper;
      if (next === 'TRY') {
        this.i += 2;
        const body = this.list();
        this.expect('END');
        this.expect('TRY');
        this.expect('BEGIN');
        this.expect('CATCH');
        const handler = this.list();
        this.expect('END');
        this.expect('CATCH');
        if (this.peek()?.text === ';') this.i++;
        return { kind: 'try', body, handler, line };
      }
      if (next !== 'TRAN' && next !== 'TRANSACTION' && next !== 'DISTRIBUTED') {
        this.i++;
        const body = this.list();
        this.expect('END');
        if (this.peek()?.text === ';') this.i++;
        return { kind: 'block', body, line };
      }
    }
    if (tok.upper === 'IF' || tok.upper === 'WHILE') {
      this.i++;
      const cond = this.condition();
      const then = this.statement();
      if (tok.upper === 'WHILE') return { kind: 'while', cond, body: then, line };
      if (this.peek()?.upper === 'ELSE') {
        this.i++;
        return { kind: 'if', cond, then, else: this.statement(), line };
      }
      return { kind: 'if', cond, then, line };
    }
    if (tok.upper === 'ELSE' || tok.upper === 'END') this.fail(`unexpected ${tok.text}`);
    return this.simple();
  }

  private condition(): Token[] {
    const out: Token[] = [];
    let depth = 0;
    let cases = 0;
    for (;;) {
      const tok = this.peek();
      if (!tok) this.fail('condition without a statement');
      if (depth === 0 && cases === 0 && tok.kind === 'word' && STATEMENT_START.has(tok.upper) && out.length > 0) {
        return out;
      }
      if (tok.text === '(') depth++;
      else if (tok.text === ')') depth--;
      else if (tok.upper === 'CASE') cases++;
      else if (tok.upper === 'END' && cases > 0) cases--;
      out.push(tok);
      this.i++;
    }
  }

  private simple(): Stmt {
    const first = this.peek()!;
    const out: Token[] = [];
    let depth = 0;
    let cases = 0;
    for (;;) {
      const tok = this.peek();
      if (!tok) this.fail(`statement starting "${first.text}" has no terminating ';'`, first);
      if (depth === 0 && cases === 0) {
        if (tok.text === ';') {
          this.i++;
          return { kind: 'simple', tokens: out, line: first.line };
        }
        if (out.length > 0 && tok.kind === 'word' && (NEVER_INSIDE.has(tok.upper) || tok.upper === 'END')) {
          this.fail(
            `statement starting "${first.text}" (line ${first.line}) has no terminating ';' before ${tok.text}`,
            tok,
          );
        }
      }
      if (tok.text === '(') depth++;
      else if (tok.text === ')') depth--;
      else if (tok.upper === 'CASE') cases++;
      else if (tok.upper === 'END' && cases > 0) cases--;
      out.push(tok);
      this.i++;
    }
  }
}

const GO_LINE = /^[ \t]*GO[ \t]*(?:--.*)?$/i;

// The CREATE [OR ALTER] PROCEDURE / TRIGGER modules of one script.
export function parseModules(file: string, text: string): Module[] {
  const modules: Module[] = [];
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  let start = 0;
  const flush = (end: number) => {
    const batch = lines.slice(start, end).join('\n');
    const tokens = tokenize(batch, start + 1);
    let k = 0;
    if (tokens[k]?.upper !== 'CREATE') return;
    k++;
    if (tokens[k]?.upper === 'OR' && tokens[k + 1]?.upper === 'ALTER') k += 2;
    const what = tokens[k]?.upper;
    if (what !== 'PROCEDURE' && what !== 'PROC' && what !== 'TRIGGER') return;
    const nameTok = tokens[k + 1];
    if (!nameTok) throw new TsqlShapeError(`${file}:${tokens[k]!.line}: ${what} without a name`);
    let depth = 0;
    let as = -1;
    for (let j = k + 2; j < tokens.length; j++) {
      if (tokens[j]!.text === '(') depth++;
      else if (tokens[j]!.text === ')') depth--;
      else if (depth === 0 && tokens[j]!.upper === 'AS') {
        as = j;
        break;
      }
    }
    if (as < 0) throw new TsqlShapeError(`${file}:${nameTok.line}: ${nameTok.text} has no AS`);
    const bodyTokens = tokens.slice(as + 1);
    const where = `${file} (${nameTok.text})`;
    const parser = new Parser(bodyTokens, where);
    const body: Stmt[] = [];
    while (!parser.done()) body.push(parser.statement());
    modules.push({
      kind: what === 'TRIGGER' ? 'trigger' : 'procedure',
      name: nameTok.text.toLowerCase(),
      display: nameTok.text,
      file,
      line: nameTok.line,
      body,
      tokens: bodyTokens,
    });
  };
  lines.forEach((l, n) => {
    if (GO_LINE.test(l)) {
      flush(n);
      start = n + 1;
    }
  });
  flush(lines.length);
  return modules;
}

const lastPart = (name: string) => name.toLowerCase().split('.').filter(Boolean).at(-1) ?? '';
const isCountedTable = (name: string) => !/^[@#]/.test(name) && COUNTED_TABLES.has(lastPart(name));
const counterTable = (name: string) =>
  !/^[@#]/.test(name) ? COUNTER_TABLES.find((t) => t === lastPart(name)) : undefined;

// Tokens at parenthesis depth 0 of a statement, with their index.
function topLevel(tokens: Token[]): Array<{ tok: Token; at: number }> {
  const out: Array<{ tok: Token; at: number }> = [];
  let depth = 0;
  tokens.forEach((tok, at) => {
    if (tok.text === '(') depth++;
    else if (tok.text === ')') depth--;
    else if (depth === 0) out.push({ tok, at });
  });
  return out;
}

// The procedure a statement executes (EXEC p, EXEC @rc = p, INSERT ... EXEC p), lower case.
export function execTarget(s: Token[]): string | undefined {
  for (const { tok, at } of topLevel(s)) {
    if (tok.upper !== 'EXEC' && tok.upper !== 'EXECUTE') continue;
    let k = at + 1;
    if (s[k]?.text.startsWith('@') && s[k + 1]?.text === '=') k += 2;
    const name = s[k];
    return name && name.kind === 'word' ? name.text.toLowerCase() : undefined;
  }
  return undefined;
}

// Which tables a statement writes: INSERT [INTO] t, OUTPUT/SELECT ... INTO t, UPDATE/DELETE/MERGE t (an alias or a
// CTE name resolved to the table it stands for), TRUNCATE TABLE t.
export function writeTargets(s: Token[]): string[] {
  const targets = new Set<string>();
  const words = s.map((t) => (t.kind === 'word' ? t.upper : t.text));
  // Aliases: "<name> [AS] <alias>" where <name> is a table, table variable or temp table.
  const alias = new Map<string, string>();
  for (let k = 0; k + 1 < s.length; k++) {
    const a = s[k]!;
    if (a.kind !== 'word' || !/^([@#]|(keel|dbo|sys)\.)/i.test(a.text)) continue; // a table, not a column
    const b = s[k + 1]!.upper === 'AS' ? s[k + 2] : s[k + 1];
    if (b && b.kind === 'word' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(b.text) && !NOT_AN_ALIAS.has(b.upper)) {
      alias.set(b.text.toLowerCase(), a.text);
    }
  }
  // CTEs: WITH name AS ( body ) / , name AS ( body ): the tables named after FROM / JOIN in the body.
  const cte = new Map<string, string[]>();
  for (let k = 0; k + 2 < s.length; k++) {
    if ((words[k] === 'WITH' || words[k] === ',') && s[k + 2]?.upper === 'AS' && s[k + 3]?.text === '(') {
      let depth = 0;
      const read: string[] = [];
      for (let j = k + 3; j < s.length; j++) {
        if (s[j]!.text === '(') depth++;
        else if (s[j]!.text === ')' && --depth === 0) break;
        else if ((words[j] === 'FROM' || words[j] === 'JOIN') && s[j + 1]?.kind === 'word') read.push(s[j + 1]!.text);
      }
      cte.set(s[k + 1]!.text.toLowerCase(), read);
    }
  }
  const resolve = (name: string): string[] => cte.get(name.toLowerCase()) ?? [alias.get(name.toLowerCase()) ?? name];
  const top = topLevel(s);
  for (const { tok, at } of top) {
    const next = (n: number) => s[at + n];
    if (tok.upper === 'INSERT' || tok.upper === 'MERGE') {
      const t = next(1)?.upper === 'INTO' ? next(2) : next(1);
      if (t) resolve(t.text).forEach((x) => targets.add(x));
    } else if (tok.upper === 'INTO' && next(1)?.kind === 'word') {
      resolve(next(1)!.text).forEach((x) => targets.add(x));
    } else if (tok.upper === 'UPDATE' || tok.upper === 'DELETE') {
      if (next(1)?.text === '(') continue; // UPDATE(col) in a trigger condition
      const t = next(1)?.upper === 'FROM' ? next(2) : next(1);
      if (t && t.kind === 'word' && t.upper !== 'TOP') resolve(t.text).forEach((x) => targets.add(x));
    } else if (tok.upper === 'TRUNCATE' && next(1)?.upper === 'TABLE' && next(2)) {
      targets.add(next(2)!.text);
    }
  }
  return [...targets];
}

const NOT_AN_ALIAS = new Set([
  ...STATEMENT_START, 'INTO', 'ON', 'WHERE', 'INNER', 'LEFT', 'RIGHT', 'FULL', 'CROSS', 'OUTER', 'JOIN', 'OUTPUT',
  'FROM', 'VALUES', 'AND', 'OR', 'NOT', 'IS', 'IN', 'ORDER', 'GROUP', 'HAVING', 'UNION', 'ALL', 'AS', 'THEN', 'ELSE',
  'END', 'WHEN', 'OPTION', 'COLLATE', 'NULL', 'EXISTS', 'APPLY', 'PIVOT', 'TABLESAMPLE', 'FOR',
]); // prettier-ignore

const isBeginTran = (s: Token[]) =>
  s[0]?.upper === 'BEGIN' && (s[1]?.upper === 'TRAN' || s[1]?.upper === 'TRANSACTION');
const createsDeltas = (s: Token[]) =>
  s[0]?.upper === 'CREATE' && s[1]?.upper === 'TABLE' && s[2]?.text.toLowerCase() === DELTAS_TABLE;

export interface Violation {
  module: string;
  file: string;
  line: number;
  message: string;
}

function* simpleStatements(body: Stmt[]): Generator<{ tokens: Token[]; line: number }> {
  for (const st of body) {
    switch (st.kind) {
      case 'simple':
        yield st;
        break;
      case 'block':
        yield* simpleStatements(st.body);
        break;
      case 'if':
        yield* simpleStatements(st.else ? [st.then, st.else] : [st.then]);
        break;
      case 'while':
        yield* simpleStatements([st.body]);
        break;
      case 'try':
        yield* simpleStatements([...st.body, ...st.handler]);
        break;
    }
  }
}

export function createsDeltasTable(m: Module): boolean {
  for (const s of simpleStatements(m.body)) if (createsDeltas(s.tokens)) return true;
  return false;
}

// How many counted statements a module runs in its caller's transaction: 0 when it creates its own #KeelCountDeltas
// (it applies its own counters), else its counted DML (DeadLetter: 2).
function countedInCaller(
  m: Module | undefined,
  all: Map<string, Module>,
  seen = new Set<string>(),
  name = m?.name,
): number {
  if (!m) return name === DEAD_LETTER ? 2 : 0; // checked alone (a broken copy): DeadLetter's delete and insert
  if (createsDeltasTable(m) || seen.has(m.name)) return 0;
  seen.add(m.name);
  let n = 0;
  for (const s of simpleStatements(m.body)) {
    if (writeTargets(s.tokens).some(isCountedTable)) n++;
    const callee = execTarget(s.tokens);
    if (callee) n += countedInCaller(all.get(callee), all, seen, callee);
  }
  return n;
}

interface PathState {
  tran: boolean;
  applies: number; // ApplyCounters calls in the open transaction, capped at 2
  countedAfterApply: boolean;
  deltas: boolean; // #KeelCountDeltas created
  counted: number; // counted statements on this path (procedures without the table), capped at 2
}
const key = (p: PathState) => `${+p.tran}${p.applies}${+p.countedAfterApply}${+p.deltas}${p.counted}`;

class PathChecker {
  readonly violations: Violation[] = [];
  private readonly reported = new Set<string>();
  constructor(
    private readonly m: Module,
    private readonly all: Map<string, Module>,
    private readonly usesDeltas: boolean,
  ) {}

  private report(line: number, message: string): void {
    const k = `${line}:${message}`;
    if (this.reported.has(k)) return;
    this.reported.add(k);
    this.violations.push({ module: this.m.display, file: this.m.file, line, message });
  }

  // Runs a list of statements from a set of states; returns the states that fall through, and every state seen at
  // a statement start (for CATCH: an error can be raised by any statement).
  run(body: Stmt[], input: PathState[]): { out: PathState[]; seen: PathState[] } {
    let cur = dedupe(input);
    const seen: PathState[] = [...cur];
    for (const st of body) {
      const r = this.one(st, cur);
      seen.push(...r.seen);
      cur = r.out;
    }
    return { out: cur, seen: dedupe(seen) };
  }

  private one(st: Stmt, input: PathState[]): { out: PathState[]; seen: PathState[] } {
    switch (st.kind) {
      case 'block':
        return this.run(st.body, input);
      case 'if': {
        const a = this.one(st.then, input);
        const b = st.else ? this.one(st.else, input) : { out: input, seen: [] };
        return { out: dedupe([...a.out, ...b.out]), seen: [...a.seen, ...b.seen] };
      }
      case 'while': {
        let all = dedupe(input);
        const seen: PathState[] = [];
        for (let round = 0; round < 16; round++) {
          const r = this.one(st.body, all);
          seen.push(...r.seen);
          const next = dedupe([...all, ...r.out]);
          if (next.length === all.length) break;
          all = next;
        }
        return { out: all, seen };
      }
      case 'try': {
        const body = this.run(st.body, input);
        const handler = this.run(st.handler, body.seen);
        return { out: dedupe([...body.out, ...handler.out]), seen: [...body.seen, ...handler.seen] };
      }
      case 'simple':
        return { out: dedupe(input.flatMap((p) => this.step(st, p))), seen: input };
    }
  }

  private step(st: { tokens: Token[]; line: number }, p: PathState): PathState[] {
    const s = st.tokens;
    const head = s[0]?.upper;
    const q = { ...p };
    if (createsDeltas(s)) return [{ ...q, deltas: true }];
    if (head === 'RETURN' || head === 'THROW') {
      if (head === 'RETURN' && q.tran && this.usesDeltas) this.report(st.line, 'RETURN inside an open transaction');
      return []; // the path leaves (THROW: to the CATCH, whose states come from "seen")
    }
    if (isBeginTran(s)) {
      if (this.usesDeltas && q.tran) this.report(st.line, 'BEGIN TRANSACTION inside an open transaction');
      return [{ ...q, tran: true, applies: 0, countedAfterApply: false }];
    }
    if (head === 'ROLLBACK') return [{ ...q, tran: false, applies: 0, countedAfterApply: false }];
    if (head === 'COMMIT') {
      if (this.usesDeltas) {
        if (q.applies === 0)
          this.report(st.line, 'COMMIT reachable on a path that did not call keel.ApplyCounters in this transaction');
        if (q.applies > 1)
          this.report(st.line, 'COMMIT after keel.ApplyCounters ran more than once in one transaction');
        if (q.countedAfterApply)
          this.report(
            st.line,
            'COMMIT after a counted statement that followed keel.ApplyCounters (its deltas are lost)',
          );
      }
      return [{ ...q, tran: false, applies: 0, countedAfterApply: false }];
    }
    const callee = execTarget(s);
    if (callee === APPLY_COUNTERS) {
      if (!this.usesDeltas) this.report(st.line, 'calls keel.ApplyCounters without creating #KeelCountDeltas');
      else if (!q.tran) this.report(st.line, 'calls keel.ApplyCounters outside a transaction');
      return [{ ...q, applies: Math.min(2, q.applies + 1), countedAfterApply: false }];
    }
    if (callee && IN_CALLER_TRANSACTION.has(callee) && !this.usesDeltas)
      this.report(
        st.line,
        `calls ${callee === DEAD_LETTER ? 'keel.DeadLetter' : 'keel.FlowSettle'} without creating #KeelCountDeltas`,
      );
    const counted =
      (writeTargets(s).some(isCountedTable) ? 1 : 0) +
      (callee ? countedInCaller(this.all.get(callee), this.all, new Set(), callee) : 0);
    if (counted === 0) return [q];
    if (this.usesDeltas) {
      if (!q.deltas) this.report(st.line, 'counted statement before #KeelCountDeltas is created');
      else if (!q.tran)
        this.report(st.line, 'counted statement outside a transaction: its deltas would never be applied');
      return [{ ...q, countedAfterApply: q.applies > 0 }];
    }
    const n = Math.min(2, q.counted + counted);
    if (n > 1)
      this.report(
        st.line,
        'more than one counted statement without #KeelCountDeltas: a trigger would write the read counters before ' +
          'a later statement of the transaction',
      );
    return [{ ...q, counted: n }];
  }

  finish(out: PathState[]): void {
    if (this.usesDeltas && out.some((p) => p.tran)) this.report(this.m.line, 'a path ends with the transaction open');
  }
}

function dedupe(states: PathState[]): PathState[] {
  const m = new Map<string, PathState>();
  for (const s of states) m.set(key(s), s);
  return [...m.values()];
}

// Rule 4: a table variable read twice in one statement is joined on a column some index of it leads with.
function selfJoinViolations(m: Module): Violation[] {
  const out: Violation[] = [];
  // DECLARE @v TABLE ( ... ): the leading column of its PRIMARY KEY and of each INDEX.
  const leading = new Map<string, Set<string>>();
  const t = m.tokens;
  for (let k = 0; k + 3 < t.length; k++) {
    if (t[k]!.upper !== 'DECLARE' || !t[k + 1]!.text.startsWith('@') || t[k + 2]!.upper !== 'TABLE') continue;
    const name = t[k + 1]!.text.toLowerCase();
    const cols = new Set<string>();
    let depth = 0;
    let columnStart = true;
    let column = '';
    for (let j = k + 3; j < t.length; j++) {
      const tok = t[j]!;
      if (tok.text === '(') {
        depth++;
        if (depth === 2 && (t[j - 1]?.upper === 'KEY' || t[j - 2]?.upper === 'INDEX' || t[j - 3]?.upper === 'INDEX'))
          cols.add(t[j + 1]!.text.toLowerCase()); // PRIMARY KEY (a, ...) / INDEX ix [NONCLUSTERED] (a, ...)
        continue;
      }
      if (tok.text === ')') {
        if (--depth === 0) break;
        continue;
      }
      if (depth !== 1) continue;
      if (tok.text === ',') {
        columnStart = true;
        continue;
      }
      if (columnStart) {
        column = tok.text.toLowerCase();
        columnStart = false;
      }
      if (tok.upper === 'KEY' && t[j - 1]?.upper === 'PRIMARY' && t[j + 1]?.text !== '(') cols.add(column);
    }
    leading.set(name, cols);
  }
  for (const st of simpleStatements(m.body)) {
    const s = st.tokens;
    const aliases = new Map<string, string>(); // alias -> table variable
    for (let k = 0; k + 1 < s.length; k++) {
      const v = s[k]!.text.toLowerCase();
      if (!leading.has(v) || !['FROM', 'JOIN'].includes(s[k - 1]?.upper ?? '')) continue;
      const a = s[k + 1]!.upper === 'AS' ? s[k + 2] : s[k + 1];
      if (a && a.kind === 'word') aliases.set(a.text.toLowerCase(), v);
    }
    for (let k = 1; k + 1 < s.length; k++) {
      if (s[k]!.text !== '=') continue;
      const [l, r] = [s[k - 1]!.text.toLowerCase().split('.'), s[k + 1]!.text.toLowerCase().split('.')];
      if (l.length !== 2 || r.length !== 2) continue;
      const [lv, rv] = [aliases.get(l[0]!), aliases.get(r[0]!)];
      if (!lv || lv !== rv || l[0] === r[0] || l[1] !== r[1]) continue;
      if (!leading.get(lv)!.has(l[1]!)) {
        out.push({
          module: m.display,
          file: m.file,
          line: s[k]!.line,
          message:
            `joins ${lv} to itself on ${l[1]}, which neither its primary key nor an index of it leads with ` +
            '(a plan cached for a small table variable would scan it once per row)',
        });
      }
    }
  }
  return out;
}

export interface LockOrderReport {
  modules: Module[];
  deltasProcedures: string[];
  counterWriters: Map<string, Set<string>>; // module -> counter tables it writes
  violations: Violation[];
}

export function checkLockOrder(scripts: Array<{ file: string; text: string }>): LockOrderReport {
  const modules = scripts.flatMap((s) => parseModules(s.file, s.text));
  const all = new Map(modules.map((m) => [m.name, m]));
  const violations: Violation[] = [];
  const counterWriters = new Map<string, Set<string>>();
  const deltasProcedures: string[] = [];

  for (const m of modules) {
    // Rule 3: who writes the counter tables, and in what order.
    const order: Array<{ table: string; line: number }> = [];
    for (const s of simpleStatements(m.body)) {
      for (const target of writeTargets(s.tokens)) {
        const table = counterTable(target);
        if (!table) continue;
        order.push({ table, line: s.line });
        if (!counterWriters.has(m.name)) counterWriters.set(m.name, new Set());
        counterWriters.get(m.name)!.add(table);
        const allowed =
          m.name === APPLY_COUNTERS ||
          COUNTER_TRIGGERS.has(m.name) ||
          COUNTER_WRITE_ALLOWED.some((a) => a.module === m.name && a.table === table);
        if (!allowed)
          violations.push({
            module: m.display,
            file: m.file,
            line: s.line,
            message: `writes keel.${table} directly: only keel.ApplyCounters and the counter triggers may (lock order step 4)`,
          });
      }
    }
    if (m.name === APPLY_COUNTERS) {
      let rank = -1;
      for (const w of order) {
        const r = COUNTER_TABLES.indexOf(w.table as (typeof COUNTER_TABLES)[number]);
        if (r < rank)
          violations.push({
            module: m.display,
            file: m.file,
            line: w.line,
            message: `writes keel.${w.table} after keel.${COUNTER_TABLES[rank]}: the order is ${COUNTER_TABLES.join(' -> ')}`,
          });
        rank = Math.max(rank, r);
      }
      for (const s of simpleStatements(m.body)) {
        if (writeTargets(s.tokens).some(isCountedTable) || isBeginTran(s.tokens) || s.tokens[0]?.upper === 'COMMIT')
          violations.push({ module: m.display, file: m.file, line: s.line, message: 'must only write the counters' });
      }
      continue;
    }
    if (m.kind === 'trigger') {
      if (COUNTER_TRIGGERS.has(m.name)) violations.push(...triggerDefers(m, order));
      continue;
    }
    if (IN_CALLER_TRANSACTION.has(m.name)) {
      violations.push(...deadLetterShape(m));
      continue;
    }

    // Rules 1 and 2: every path of the body.
    const usesDeltas = createsDeltasTable(m);
    if (usesDeltas) deltasProcedures.push(m.name);
    const checker = new PathChecker(m, all, usesDeltas);
    const start: PathState = { tran: false, applies: 0, countedAfterApply: false, deltas: false, counted: 0 };
    checker.finish(checker.run(m.body, [start]).out);
    violations.push(...checker.violations);
  }
  for (const m of modules) violations.push(...selfJoinViolations(m));
  return { modules, deltasProcedures: deltasProcedures.sort(), counterWriters, violations };
}

// A counter trigger: IF OBJECT_ID(N'tempdb..#KeelCountDeltas') IS NOT NULL BEGIN <append>; RETURN; END, at the top
// level of its body, before any statement that writes its counter table.
// The statements of a module body written as BEGIN ... END.
const outer = (m: Module): Stmt[] => (m.body.length === 1 && m.body[0]!.kind === 'block' ? m.body[0]!.body : m.body);

function triggerDefers(m: Module, writes: Array<{ table: string; line: number }>): Violation[] {
  const body = outer(m);
  const defer = body.findIndex(
    (st) =>
      st.kind === 'if' &&
      st.cond.some((t) => t.kind === 'string' && t.text.toLowerCase() === `tempdb..${DELTAS_TABLE}`) &&
      st.cond.some((t, k) => t.upper === 'NOT' && st.cond[k - 1]?.upper === 'IS') &&
      st.then.kind === 'block' &&
      st.then.body.at(-1)?.kind === 'simple' &&
      (st.then.body.at(-1) as { tokens: Token[] }).tokens[0]?.upper === 'RETURN' &&
      [...simpleStatements(st.then.body)].some((s) =>
        writeTargets(s.tokens).some((x) => x.toLowerCase() === DELTAS_TABLE),
      ),
  );
  const deferLine = defer >= 0 ? body[defer]!.line : Infinity;
  const early = writes.filter((w) => w.line < deferLine);
  if (defer < 0)
    return [
      {
        module: m.display,
        file: m.file,
        line: m.line,
        message: 'does not defer to #KeelCountDeltas (IF OBJECT_ID(...) IS NOT NULL: append the delta, RETURN)',
      },
    ];
  return early.map((w) => ({
    module: m.display,
    file: m.file,
    line: w.line,
    message: `writes keel.${w.table} before deferring to #KeelCountDeltas`,
  }));
}

// keel.DeadLetter (and keel.FlowSettle): refuses to run without #KeelCountDeltas before its first counted statement,
// opens and commits no transaction, and leaves the counters to its caller's keel.ApplyCounters.
function deadLetterShape(m: Module): Violation[] {
  const out: Violation[] = [];
  let guarded = false;
  for (const st of outer(m)) {
    if (
      st.kind === 'if' &&
      st.cond.some((t) => t.kind === 'string' && t.text.toLowerCase() === `tempdb..${DELTAS_TABLE}`) &&
      st.then.kind === 'simple' &&
      st.then.tokens[0]?.upper === 'THROW'
    )
      guarded = true;
    for (const s of simpleStatements([st])) {
      if (writeTargets(s.tokens).some(isCountedTable) && !guarded)
        out.push({
          module: m.display,
          file: m.file,
          line: s.line,
          message: 'counted statement before the #KeelCountDeltas guard',
        });
      if (isBeginTran(s.tokens) || s.tokens[0]?.upper === 'COMMIT' || execTarget(s.tokens) === APPLY_COUNTERS)
        out.push({
          module: m.display,
          file: m.file,
          line: s.line,
          message: "must run in its caller's transaction and leave the counters to it",
        });
    }
  }
  return out;
}
