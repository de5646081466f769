// WorkerPresence (shared/jobs/presence.ts): how often a processor writes its worker registry row, on a fake clock.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { JobStore, WorkerRegistration } from '../../shared/jobs/contract.js';
import { WorkerPresence, hostingInstanceId } from '../../shared/jobs/presence.js';

function recordingStore(fail = false) {
  const calls: { op: string; reg?: WorkerRegistration; id?: string }[] = [];
  let release: (() => void) | undefined;
  const store = {
    hold: false,
    async registerWorker(reg: WorkerRegistration) {
      calls.push({ op: 'register', reg });
      if (store.hold) await new Promise<void>((r) => (release = r));
      if (fail) throw new Error('database down');
      return new Date();
    },
    async deregisterWorker(id: string) {
      calls.push({ op: 'deregister', id });
      return true;
    },
  };
  return { store, calls, release: () => release?.() };
}

const warnings: string[] = [];
const log = { info() {}, warn: (m: string) => void warnings.push(m), error() {} };

beforeEach(() => {
  vi.useFakeTimers();
  vi.setSystemTime(new Date('2026-12-02T10:00:00Z'));
  warnings.length = 0;
});
afterEach(() => {
  vi.useRealTimers();
});

const opts = { appVersion: '1.0.0', concurrency: 8, refreshMs: 300_000, host: 'h1', instanceId: null, pid: 7 };

describe('WorkerPresence', () => {
  it('writes at the first touch, then at most once per refresh interval however often it is touched', async () => {
    const { store, calls } = recordingStore();
    let done = 0;
    const p = new WorkerPresence(store as unknown as JobStore, 'w1', opts, () => done, log);
    for (let i = 0; i < 50; i++) p.touch();
    await p.settled();
    expect(calls.map((c) => c.op)).toEqual(['register']);
    expect(calls[0]!.reg).toMatchObject({ workerId: 'w1', host: 'h1', pid: 7, queues: null, jobsDone: 0 });
    done = 12;
    vi.setSystemTime(Date.now() + 299_999);
    p.touch();
    await p.settled();
    expect(calls).toHaveLength(1);
    vi.setSystemTime(Date.now() + 1);
    p.touch();
    p.touch();
    await p.settled();
    expect(calls).toHaveLength(2);
    expect(calls[1]!.reg!.jobsDone).toBe(12);
  });

  it('a failed write is logged and tried again only after the interval', async () => {
    const { store, calls } = recordingStore(true);
    const p = new WorkerPresence(store as unknown as JobStore, 'w1', opts, () => 0, log);
    p.touch();
    await p.settled();
    p.touch();
    await p.settled();
    expect(calls).toHaveLength(1);
    expect(warnings[0]).toMatch(/could not refresh/);
    vi.setSystemTime(Date.now() + 300_000);
    p.touch();
    await p.settled();
    expect(calls).toHaveLength(2);
  });

  it('stop waits for the write in flight, then removes the row; nothing after it', async () => {
    const { store, calls, release } = recordingStore();
    store.hold = true;
    const p = new WorkerPresence(store as unknown as JobStore, 'w1', opts, () => 0, log);
    p.touch();
    const stopped = p.stop();
    await Promise.resolve();
    expect(calls.map((c) => c.op)).toEqual(['register']); // the delete waits: the upsert must not land after it
    release();
    await stopped;
    expect(calls.map((c) => c.op)).toEqual(['register', 'deregister']);
    vi.setSystemTime(Date.now() + 600_000);
    p.touch();
    await p.settled();
    expect(calls).toHaveLength(2);
  });

  it('stop gives up waiting on a database that does not answer, after its bound', async () => {
    const { store, calls } = recordingStore();
    store.hold = true; // the registration never returns
    const p = new WorkerPresence(store as unknown as JobStore, 'w1', opts, () => 0, log);
    p.touch();
    let done = false;
    const stopped = p.stop(1_000).then(() => (done = true));
    await vi.advanceTimersByTimeAsync(999);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await stopped;
    expect(done).toBe(true);
    expect(calls.map((c) => c.op)).toEqual(['register']);
    expect(warnings.at(-1)).toMatch(/did not finish in time/);
  });

  it('a processor that never wrote its row sends nothing at stop', async () => {
    const { store, calls } = recordingStore();
    const p = new WorkerPresence(store as unknown as JobStore, 'w1', opts, () => 0, log);
    await p.stop();
    expect(calls).toEqual([]);
  });

  it('reports the Functions instance, cut to the column', () => {
    expect(hostingInstanceId({ WEBSITE_INSTANCE_ID: ` ${'a'.repeat(200)} ` })).toBe('a'.repeat(128));
    expect(hostingInstanceId({})).toBeNull();
    const p = new WorkerPresence({} as JobStore, 'w', { ...opts, queues: [], instanceId: undefined }, () => 0, log);
    expect(p.registration().queues).toBeNull(); // none named: every queue
  });
});
