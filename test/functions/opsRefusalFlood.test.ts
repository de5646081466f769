// A flood of refused operator calls (401/403) writes a bounded number of audit rows: per caller and route, the first
// refusal of a window is recorded at once (its own record, as every refusal was before), the ones after it in the
// window are counted, and one more record at the window's end says how many. Under concurrency: refusals that arrive
// together still write exactly one first record, and each caller keeps its own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ops } from '../../functions/ops.js';
import {
  auditRows,
  context,
  createTestRuntime,
  jsonOf,
  lastAuditId,
  request,
  until,
  type TestRuntime,
} from './support.js';

const WINDOW_MS = 2_000;
let t: TestRuntime;

beforeAll(async () => {
  t = await createTestRuntime('ops_flood', { env: { KEEL_OPS_REFUSAL_WINDOW_MS: String(WINDOW_MS) } });
});

afterAll(async () => {
  await t?.close();
});

// A key holder without the operator role pausing a queue: refused 403 (from the given client address).
async function refusedPause(ip: string) {
  const res = await ops(
    request('POST', 'queues/flood-q/pause', { body: {}, headers: { 'x-forwarded-for': ip } }),
    context('ops'),
  );
  return { status: res.status, body: jsonOf(res) };
}

const refusedRows = async (after: string) =>
  (await auditRows(t.pool, after)).filter((r) => r.action === 'pauseQueue' && r.outcome === 'refused');

describe('refused calls in a flood', () => {
  it('record the first refusal of each caller at once, count the rest, and record the count when the window closes', async () => {
    const before = await lastAuditId(t.pool);
    const [flood, other] = await Promise.all([
      Promise.all(Array.from({ length: 60 }, () => refusedPause('203.0.113.7'))),
      Promise.all(Array.from({ length: 5 }, () => refusedPause('198.51.100.20'))),
    ]);
    // Every call is still refused, and says why.
    for (const r of [...flood, ...other]) expect(r).toMatchObject({ status: 403, body: { error: 'forbidden' } });
    const firsts = await refusedRows(before);
    expect(firsts.map((r) => r.client_ip).sort()).toEqual(['198.51.100.20', '203.0.113.7']);
    for (const r of firsts) expect(r.reason).toContain('Keel.Operator');
    // The window closes: one record per caller with the count of the refusals after its first.
    const all = await until(
      'the coalesced counts recorded',
      async () => {
        const rows = await refusedRows(before);
        return rows.length === 4 ? rows : null;
      },
      15_000,
    );
    const counts = all.slice(2).map((r) => [r.client_ip, /^(\d+) more refusals/.exec(String(r.reason))?.[1]]);
    expect(counts.sort()).toEqual([
      ['198.51.100.20', '4'],
      ['203.0.113.7', '59'],
    ]);
    // A refusal after the window is a first again: recorded at once.
    const next = await lastAuditId(t.pool);
    expect((await refusedPause('203.0.113.7')).status).toBe(403);
    const again = await refusedRows(next);
    expect(again).toHaveLength(1);
    expect(again[0]!.reason).not.toMatch(/coalesced/);
  });

  it('a refusal alone in its window leaves exactly its own record, and no count record after it', async () => {
    const before = await lastAuditId(t.pool);
    expect((await refusedPause('192.0.2.55')).status).toBe(403);
    await new Promise((r) => setTimeout(r, WINDOW_MS + 500));
    expect(await refusedRows(before)).toHaveLength(1);
  });
});
