// LISTEN/NOTIFY wake-ups: enqueueing a due job wakes the subscribers of its queue at commit; delayed jobs,
// duplicates and other queues do not.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresHarness } from './postgres.harness.js';
import type { JobStore } from '../../shared/jobs/contract.js';
import { PostgresWakeups } from '../../shared/engines/postgres/wakeups.js';
import { FaultProxy } from '../support/faultProxy.js';
import { until as untilTrue } from '../support/until.js';

let h: PostgresHarness;
let store: JobStore;
let wakeups: PostgresWakeups;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// Notifications reach the one LISTEN connection in commit order: once a later enqueue's has arrived, an earlier one
// that was going to arrive has too. So wait for the expected ones (bounded), not a guessed time.
const until = (what: string, probe: () => boolean) => untilTrue(what, probe, { pollMs: 10, maxPollMs: 10 });

beforeAll(async () => {
  h = new PostgresHarness();
  store = await h.createStore({ poolSize: 4 });
  wakeups = new PostgresWakeups(h.url);
});
afterAll(async () => {
  await wakeups?.close();
  await h?.close();
});

describe('postgres wake-ups', () => {
  it('wakes the subscribers of a queue when a due job is enqueued there, and no one else', async () => {
    const woken: string[] = [];
    const offA = await wakeups.subscribe(['wake-a'], () => woken.push('a'));
    await wakeups.subscribe(['wake-b'], () => woken.push('b'));
    // A job of a queue of its own, enqueued last: what was enqueued before it has arrived once it has.
    await wakeups.subscribe(['wake-m'], () => woken.push('m'));
    const marker = async () => {
      const n = woken.filter((w) => w === 'm').length;
      await store.enqueue({ queue: 'wake-m', type: 't' });
      await until('the marker', () => woken.filter((w) => w === 'm').length > n);
    };
    await store.enqueueMany([{ queue: 'wake-a', type: 't', delayMs: 60_000 }]);
    await store.enqueue({ queue: 'wake-a', type: 't', idempotencyKey: 'wake-k' });
    await until('the due job', () => woken.length >= 1);
    expect(woken).toEqual(['a']); // the delayed job (enqueued before it) notified no one; the due one woke a only
    await store.enqueue({ queue: 'wake-a', type: 't', idempotencyKey: 'wake-k' }); // a duplicate: nothing new is due
    await store.enqueueMany([
      { queue: 'wake-b', type: 't' },
      { queue: 'wake-b', type: 't' },
      { queue: 'wake-a', type: 't', runAt: new Date(Date.now() - 1000) },
    ]);
    await marker();
    expect(woken.sort()).toEqual(['a', 'a', 'b', 'm']); // one notification per queue per enqueue call
    await offA();
    await store.enqueue({ queue: 'wake-a', type: 't' });
    await marker();
    expect(woken.sort()).toEqual(['a', 'a', 'b', 'm', 'm']); // a unsubscribed: woken no more
  });

  // A server that is away longer than the first reconnect attempt (a restart, a network outage): the reconnects go on
  // until it is back, and the subscribers are woken again. Before, the first failed reconnect ended the retries and
  // every worker was left on polling alone until it was restarted.
  it('reconnects after an outage that outlasts several attempts, and after a first subscribe that failed', async () => {
    const u = new URL(h.url);
    const proxy = await FaultProxy.start(u.hostname, Number(u.port || 5432));
    const through = new PostgresWakeups(proxy.urlFor(h.url));
    const late = new PostgresWakeups(proxy.urlFor(h.url));
    try {
      let woken = 0;
      await through.subscribe(['wake-o'], () => woken++);
      proxy.down();
      await sleep(800); // attempts after 100, 200 and 400 ms all find the server away
      // A worker that starts during the outage: its subscribe fails (it polls meanwhile), and it is retried.
      let lateWoken = 0;
      await expect(late.subscribe(['wake-o'], () => lateWoken++)).rejects.toThrow();
      proxy.up();
      await until('the reconnect', () => woken > 0 && lateWoken > 0); // both wake their subscribers on reconnect
      const [before, lateBefore] = [woken, lateWoken];
      await store.enqueue({ queue: 'wake-o', type: 't' });
      await until('the wake-up after the outage', () => woken > before && lateWoken > lateBefore);
    } finally {
      await through.close();
      await late.close();
      await proxy.close();
    }
  });

  // A peer that goes silent without cutting the connection (a NAT or firewall dropping the flow): nothing reaches the
  // listener and nothing fails. Before, the LISTEN connection had no bound and no check: a worker whose listener went
  // silent so got no wake-up again until it was restarted (polling only), and a LISTEN that got no answer hung its
  // subscribe for good.
  it('drops and re-opens a listening connection that went silent, and bounds a LISTEN that gets no answer', async () => {
    const u = new URL(h.url);
    const proxy = await FaultProxy.start(u.hostname, Number(u.port || 5432));
    const opts = { connectTimeoutMs: 2_000, statementTimeoutMs: 500, pingEveryMs: 200 };
    const silentListen = new PostgresWakeups(proxy.urlFor(h.url), opts);
    const silentLater = new PostgresWakeups(proxy.urlFor(h.url), opts);
    try {
      // The LISTEN itself gets no answer: the subscribe fails within its bound, and the retry (a new connection) listens.
      const listenLost = proxy.arm({ kind: 'blackhole', trigger: (sql) => /^listen /i.test(sql) });
      let woken = 0;
      await expect(silentListen.subscribe(['wake-s'], () => woken++)).rejects.toThrow();
      await listenLost;
      await until('the re-opened listener', () => woken > 0);
      let before = woken;
      await store.enqueue({ queue: 'wake-s', type: 't' });
      await until('the wake-up on the new connection', () => woken > before);
      await silentListen.close(); // the next fault is meant for the other listener's ping

      // A listener that worked goes silent later: its ping gets no answer, it is re-opened and wakes again.
      let laterWoken = 0;
      await silentLater.subscribe(['wake-s2'], () => laterWoken++);
      const pingLost = proxy.arm({ kind: 'blackhole', trigger: (sql) => sql.includes('keel-wakeups ping') });
      await pingLost;
      await until('the listener re-opened after its ping went unanswered', () => laterWoken > 0);
      before = laterWoken;
      await store.enqueue({ queue: 'wake-s2', type: 't' });
      await until('the wake-up after the silent drop', () => laterWoken > before);
    } finally {
      await silentListen.close();
      await silentLater.close();
      await proxy.close();
    }
  });
});
