// The producer's entry point (keel.EnqueueMany, the one procedure keel_producer may execute) answers the store's clock
// (StoreNow) for @keel/client's wake(). It is read by the producer's own mssql pool, whose options Keel does not set:
// tedious reads a datetime2 in the pool's useUTC setting (false: as the host's local time), a datetimeoffset as the
// instant it is. So every clock such a procedure answers is a datetimeoffset. No SQL Server here: the premise is shown
// on tedious' own value parser, the rule on the scripts.
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { SQLSERVER_SQL_DIR } from '../../shared/engines/sqlserver/jobStore.js';

const root = path.resolve(import.meta.dirname, '../..');

// tedious' value parser on the wire bytes of 2026-01-01T12:00:00Z as datetime2(7) and datetimeoffset(7) (+00:00),
// in a process whose zone is UTC+05:30: how far from the instant each is read, per useUTC.
const PROBE = `
const { readValue } = require('tedious/lib/value-parser.js');
const at = Date.UTC(2026, 0, 1, 12, 0, 0);
const days = 730119 + Math.round((Date.UTC(2026, 0, 1) - Date.UTC(2000, 0, 1)) / 864e5);
function wire(offset) {
  const b = Buffer.alloc(offset ? 11 : 9);
  b.writeUInt8(offset ? 10 : 8, 0);
  b.writeUIntLE(12 * 3600 * 1e7, 1, 5);
  b.writeUIntLE(days, 6, 3);
  if (offset) b.writeInt16LE(0, 9);
  return b;
}
const out = {};
for (const useUTC of [true, false])
  for (const [name, offset] of [['DateTime2', false], ['DateTimeOffset', true]])
    out[name + '/' + useUTC] = readValue(wire(offset), 0, { type: { name }, scale: 7 }, { useUTC }).value.getTime() - at;
console.log(JSON.stringify(out));
`;

const CLOCK = /\b(SYSUTCDATETIME|SYSDATETIME|GETDATE|GETUTCDATE)\s*\(\s*\)|\bCURRENT_TIMESTAMP\b/i;

function scripts(): Array<{ file: string; text: string }> {
  return readdirSync(SQLSERVER_SQL_DIR)
    .filter((f) => /^(V\d+|R)__.*\.sql$/.test(f))
    .map((file) => ({ file, text: readFileSync(path.join(SQLSERVER_SQL_DIR, file), 'utf8').replace(/--[^\n]*/g, '') }));
}

// The procedures the enqueue-only role may execute (R__900_executor_role.sql).
function producerProcedures(all: Array<{ text: string }>): string[] {
  const names = new Set<string>();
  for (const { text } of all)
    for (const m of text.matchAll(/GRANT\s+EXECUTE\s+ON\s+OBJECT::([\w.]+)\s+TO\s+keel_producer\b/gi)) names.add(m[1]!);
  return [...names];
}

// Each result column of a SELECT in a body that reads a clock and is not a datetimeoffset: "<expression> AS <name>".
function zonelessClocks(body: string): string[] {
  const found: string[] = [];
  for (const m of body.matchAll(/\bSELECT\b([\s\S]*?)(?=\bFROM\b|;|\bSELECT\b|$)/gi)) {
    for (const item of m[1]!.split(/,(?![^()]*\))/)) {
      if (!CLOCK.test(item) || /@\w+\s*=/.test(item)) continue; // an assignment is no answer
      if (/^\s*(TODATETIMEOFFSET\s*\(|SYSDATETIMEOFFSET\s*\(\s*\))/i.test(item)) continue;
      found.push(item.trim().replace(/\s+/g, ' '));
    }
  }
  return found;
}

describe("the producer's entry point answers the store's clock as an instant", () => {
  it('tedious reads a datetime2 by the pool useUTC setting, a datetimeoffset as the instant whatever it is', () => {
    const r = spawnSync(process.execPath, ['-e', PROBE], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, TZ: 'Asia/Kolkata' },
      timeout: 60_000,
    });
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual({
      'DateTime2/true': 0,
      'DateTimeOffset/true': 0,
      'DateTime2/false': -5.5 * 3600_000, // the host's offset off the store's clock
      'DateTimeOffset/false': 0,
    });
  });

  it('every clock a procedure keel_producer may execute answers is a datetimeoffset (EnqueueMany: StoreNow)', () => {
    const all = scripts();
    const procs = producerProcedures(all);
    expect(procs.map((p) => p.toLowerCase())).toEqual(['keel.enqueuemany']);
    for (const name of procs) {
      const text = all.map((s) => s.text).find((t) => t.includes(`CREATE OR ALTER PROCEDURE ${name}\n`))!;
      const start = text.indexOf(`CREATE OR ALTER PROCEDURE ${name}\n`);
      const body = text.slice(start, text.indexOf('\nGO\n', start));
      expect(body).toMatch(/\bAS\s+StoreNow\b/); // not vacuous: the answer is there
      expect(zonelessClocks(body), name).toEqual([]);
    }
  });

  it('the rule catches a zone-less clock in a result, and leaves assignments and datetimeoffsets alone', () => {
    expect(zonelessClocks('SELECT SYSUTCDATETIME() AS StoreNow;')).toEqual(['SYSUTCDATETIME() AS StoreNow']);
    expect(zonelessClocks('SELECT Id, GETUTCDATE() AS At FROM t;')).toEqual(['GETUTCDATE() AS At']);
    expect(zonelessClocks('SELECT TODATETIMEOFFSET(SYSUTCDATETIME(), 0) AS StoreNow;')).toEqual([]);
    expect(zonelessClocks('SELECT SYSDATETIMEOFFSET() AS Now;')).toEqual([]);
    expect(zonelessClocks('SELECT @Now = SYSUTCDATETIME();')).toEqual([]);
  });
});
