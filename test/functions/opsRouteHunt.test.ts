// Route defects an independent caller found (route hunt 6), each a case that failed before its fix:
// - time ranges (`from`/`to` of the job and audit searches, `failedAfter`/`failedBefore` of resurrect by filter)
//   were compared as text, so an instant written with an offset or a fraction was judged by its spelling: a valid
//   range refused as "from after to", an inverted one let through;
// - the principal's name is data the transfer journal stores (a pause's `changedBy`, an abandon's reason): a name
//   the database cannot store (a NUL) made pause and resume a 500, and an abandon a 500 after the target's final
//   fence, the batch left open (a partial effect);
// - a preview (`preview: true`) affected nothing, as a dry run: its audit record says 0, not nothing;
// - a 409 that contradicted itself: resurrect of a job whose idempotency key a hot job holds said "not in the DLQ
//   (it is in dlq)", and a cancel or resurrect that lost a race to the opposite move "no longer hot (it is in hot)".
import { describe, expect, it, vi } from 'vitest';
import { encodeClientPrincipal } from '../../shared/ops/auth.js';
import { auditRows, lastAuditId } from './support.js';
import { useItemsTransfer } from './itemsTransfer.js';

const fx = useItemsTransfer({
  label: 'fn_routehunt',
  rows: 30,
  batchSize: 10,
  env: { KEEL_TRANSFER_CATCHUP_ROWS: '0', KEEL_TRANSFER_DIRECT_APPLY: 'false', KEEL_OPS_REFUSAL_WINDOW_MS: '0' },
});
const { call } = fx;

// An operator whose name holds what no database text column takes.
const operatorNamed = (name: string) => ({
  'x-ms-client-principal': encodeClientPrincipal({ name, roles: ['Keel.Operator'] }),
});

describe('time ranges are compared as instants, not as text', () => {
  // 05:00Z written as 10:00+05:00, and 00:00:00Z before 00:00:00.500Z: in order as instants, not as text.
  const ordered: [string, string][] = [
    ['2026-01-01T10:00:00+05:00', '2026-01-01T06:00:00Z'],
    ['2026-01-01T00:00:00Z', '2026-01-01T00:00:00.500Z'],
  ];
  // 06:00Z then 05:00Z (10:00+05:00): inverted, though in order as text.
  const inverted: [string, string] = ['2026-01-01T06:00:00Z', '2026-01-01T10:00:00+05:00'];
  const enc = encodeURIComponent;

  it('job search (every location) and the audit search: an ordered range is searched, an inverted one is a 400 naming from', async () => {
    for (const base of ['jobs?location=hot', 'jobs?location=archive', 'jobs?location=dlq', 'audit?limit=5']) {
      for (const [from, to] of ordered) {
        const r = await call('GET', `${base}&from=${enc(from)}&to=${enc(to)}`);
        expect(r.status, `${base} ${from} .. ${to}: ${JSON.stringify(r.body)}`).toBe(200);
      }
      const r = await call('GET', `${base}&from=${enc(inverted[0])}&to=${enc(inverted[1])}`);
      expect(r, base).toMatchObject({ status: 400, body: { error: 'invalid_request', field: 'from' } });
    }
  });

  it('resurrect by filter: failedAfter/failedBefore the same way', async () => {
    for (const [after, before] of ordered) {
      const r = await call('POST', 'dlq/resurrect', { failedAfter: after, failedBefore: before, limit: 5 });
      expect(r.status, `${after} .. ${before}: ${JSON.stringify(r.body)}`).toBe(200);
    }
    const r = await call('POST', 'dlq/resurrect', { failedAfter: inverted[0], failedBefore: inverted[1], limit: 5 });
    expect(r).toMatchObject({ status: 400, body: { error: 'invalid_request', field: 'failedAfter' } });
  });
});

describe("the principal's name as journal data", () => {
  it('pause and resume a transfer as an operator whose name holds a NUL or a lone surrogate: done, the name stored without them', async () => {
    for (const name of ['ops\u0000person', 'ops\ud800person']) {
      const paused = await call('POST', 'transfers/items/pause', { reason: 'hunt' }, operatorNamed(name));
      expect(paused.status, JSON.stringify(paused.body)).toBe(200);
      expect(paused.body).toMatchObject({ paused: true });
      expect(paused.body.changedBy).toMatch(/^ops.?person$/);
      expect(paused.body.changedBy).not.toContain('\u0000');
      const resumed = await call('POST', 'transfers/items/resume', {}, operatorNamed(name));
      expect(resumed.status, JSON.stringify(resumed.body)).toBe(200);
      expect(resumed.body).toMatchObject({ paused: false });
    }
  });

  it('abandon as such an operator: the batch is failed and its window released (no 500 after the fence), one audit record', async () => {
    fx.t.queues.clear();
    const started = await call('POST', 'transfers/items/start', {});
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    const id = started.body.batch.batchId as string;
    fx.t.queues.clear(); // the stage message: the batch stays extracting, never applied
    const from = await lastAuditId(fx.t.pool);
    const r = await call('POST', `transfers/batches/${id}/abandon`, { reason: 'hunt' }, operatorNamed('a\u0000b'));
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ abandoned: true, batch: { batchId: id, state: 'failed' } });
    expect(r.body.batch.lastError).toContain('abandoned by operator: hunt (ab)');
    expect((await call('GET', `transfers/batches/${id}`)).body.state).toBe('failed');
    const rows = (await auditRows(fx.t.pool, from)).filter((x) => x.action === 'abandonBatch');
    expect(rows.map((x) => [x.outcome, Number(x.status)])).toEqual([['ok', 200]]);
  });
});

describe('the audit record of a preview', () => {
  it('says it affected 0, as a dry run does', async () => {
    const started = await call('POST', 'transfers/items/start', {});
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    await fx.pump();
    const committed = (await call('GET', 'transfers/batches?transfer=items&state=committed')).body.items as any[];
    const b = committed[committed.length - 1];
    const from = await lastAuditId(fx.t.pool);
    const calls: [string, string, unknown][] = [
      ['abandonBatch', `transfers/batches/${b.batchId}/abandon`, { reason: 'look', preview: true }],
      ['replayTransfer', 'transfers/items/replay', { low: b.boundary.low, high: b.boundary.high, preview: true }],
      ['resurrectByFilter', 'dlq/resurrect', { limit: 5 }],
    ];
    for (const [, path, body] of calls) {
      const r = await call('POST', path, body);
      expect(r.status, `${path}: ${JSON.stringify(r.body)}`).toBe(200);
    }
    const rows = await auditRows(fx.t.pool, from);
    for (const [action] of calls) {
      const row = rows.find((x) => x.action === action);
      expect(row, action).toBeDefined();
      expect([row!.outcome, Number(row!.affected)], action).toEqual(['ok', 0]);
    }
  });
});

describe('resurrect one job whose idempotency key a hot job holds', () => {
  it('is a 409 saying so (key_held, as the bulk route says), not "not in the DLQ (it is in dlq)"; the job stays', async () => {
    const dead = await call('POST', 'jobs', { queue: 'rh-key', type: 'demo.fatal', idempotencyKey: 'rh-k1' });
    expect(dead.status, JSON.stringify(dead.body)).toBe(201);
    expect(await fx.t.rt.processor.processById(dead.body.id)).toBe('dead_lettered');
    const holder = await call('POST', 'jobs', {
      queue: 'rh-key',
      type: 'demo.fatal',
      idempotencyKey: 'rh-k1',
      delayMs: 600_000,
    });
    expect(holder.body.duplicate).toBe(false);
    const r = await call('POST', `dlq/${dead.body.id}/resurrect`, {});
    expect(r).toMatchObject({ status: 409, body: { error: 'conflict', why: 'key_held', job: { location: 'dlq' } } });
    expect(r.body.message).toContain('rh-k1');
    expect(r.body.message).not.toContain('not in the DLQ');
    const bulk = await call('POST', 'dlq/resurrect', { ids: [dead.body.id], limit: 1, dryRun: false });
    expect(bulk.body.skipped).toEqual([{ id: dead.body.id, why: 'key_held', location: 'dlq', state: 'dead' }]);
    expect((await call('GET', `jobs/${dead.body.id}`)).body.location).toBe('dlq');
  });
});

describe('a cancel or a resurrect that lost a race to the opposite move', () => {
  it('says so, not "no longer hot (it is in hot)" or "not in the DLQ (it is in dlq)"', async () => {
    const store = fx.t.rt.store;
    // Cancel: the job is in the DLQ when the cancel looks, and resurrected before the route reads where it is.
    const dead = await call('POST', 'jobs', { queue: 'rh-race', type: 'demo.fatal' });
    expect(await fx.t.rt.processor.processById(dead.body.id)).toBe('dead_lettered');
    const cancel = store.cancel.bind(store);
    const spyCancel = vi.spyOn(store, 'cancel').mockImplementationOnce(async (id) => {
      const r = await cancel(id);
      await store.resurrect([id]);
      return r;
    });
    try {
      const r = await call('POST', `jobs/${dead.body.id}/cancel`, {});
      expect(r).toMatchObject({ status: 409, body: { job: { location: 'hot' } } });
      expect(r.body.message).toContain('was not hot when the cancel looked');
    } finally {
      spyCancel.mockRestore();
    }
    // Resurrect: the job (no idempotency key) is hot when the resurrect looks, and cancelled into the DLQ before the
    // route reads where it is.
    const resurrect = store.resurrect.bind(store);
    const spyResurrect = vi.spyOn(store, 'resurrect').mockImplementationOnce(async (ids) => {
      const r = await resurrect(ids);
      await store.cancel(ids[0]!);
      return r;
    });
    try {
      const r = await call('POST', `dlq/${dead.body.id}/resurrect`, {});
      expect(r).toMatchObject({ status: 409, body: { job: { location: 'dlq' } } });
      expect(r.body.message).toContain('was not in the DLQ when the resurrect looked');
      expect(r.body.why).toBeUndefined();
    } finally {
      spyResurrect.mockRestore();
    }
  });
});
