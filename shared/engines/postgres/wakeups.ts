// LISTEN/NOTIFY wake-ups for workers on PostgreSQL: keel.enqueue_many notifies channel keel_jobs with the queue name
// of every queue that got a due job, at commit. One dedicated connection per subscriber; when it drops, it is
// re-opened with backoff (every attempt, until close(); also when the first one fails), and the worker's polling
// covers the gap (polling is always the fallback). A connection that goes silent without being cut (a NAT or firewall
// dropping an idle flow, a peer that stops answering) is noticed too: it connects within a bound, and a ping on it every
// pingEveryMs must answer within statementTimeoutMs, or it is dropped and re-opened like a lost one.
import pg from 'pg';
import type { WakeupSource } from '../../jobs/contract.js';

export const WAKEUP_CHANNEL = 'keel_jobs';

// How often an idle listening connection is pinged by default: the one statement a worker sends when nothing is due
// besides its timers' probes (test/e2e/idle.test.ts counts it).
export const WAKEUP_PING_EVERY_MS = 30_000;

export interface WakeupOptions {
  connectTimeoutMs?: number; // a connect that gets no answer fails after this (default 10 s)
  statementTimeoutMs?: number; // LISTEN and each ping fail after this without an answer (default 15 s)
  pingEveryMs?: number; // how often the listening connection is checked (default 30 s)
}

export class PostgresWakeups implements WakeupSource {
  private closed = false;
  private readonly subs = new Set<{ queues: Set<string>; onWake: () => void }>();
  private client: pg.Client | undefined;
  private connecting: Promise<void> | undefined;
  private retryMs = 100;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private pingTimer: ReturnType<typeof setInterval> | undefined;
  private readonly connectTimeoutMs: number;
  private readonly statementTimeoutMs: number;
  private readonly pingEveryMs: number;

  constructor(
    private readonly url: string,
    opts: WakeupOptions = {},
  ) {
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 10_000;
    this.statementTimeoutMs = opts.statementTimeoutMs ?? 15_000;
    this.pingEveryMs = opts.pingEveryMs ?? WAKEUP_PING_EVERY_MS;
  }

  // An empty queue list subscribes to every queue.
  async subscribe(queues: string[], onWake: () => void): Promise<() => Promise<void>> {
    const sub = { queues: new Set(queues), onWake };
    this.subs.add(sub);
    await this.ensure();
    return async () => {
      this.subs.delete(sub);
    };
  }

  private ensure(): Promise<void> {
    if (this.client || this.closed) return Promise.resolve();
    this.connecting ??= this.connect().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.url,
      application_name: 'keel-wakeups',
      connectionTimeoutMillis: this.connectTimeoutMs,
      query_timeout: this.statementTimeoutMs,
      keepAlive: true,
    });
    const lost = () => {
      if (this.client !== client) return;
      this.client = undefined;
      this.stopPing();
      client.end().catch(() => undefined);
      this.reconnectLater();
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', (n) => {
      if (n.channel !== WAKEUP_CHANNEL) return;
      for (const s of this.subs) if (s.queues.size === 0 || !n.payload || s.queues.has(n.payload)) s.onWake();
    });
    try {
      await client.connect();
      await client.query(`listen ${WAKEUP_CHANNEL}`);
    } catch (err) {
      // The server is away (restarting, unreachable): try again with backoff for as long as we are open. A failed
      // attempt used to end the retries, leaving every worker on polling alone until it was restarted.
      client.end().catch(() => undefined);
      this.reconnectLater();
      throw err;
    }
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.retryMs = 100;
    this.stopPing();
    this.pingTimer = setInterval(() => {
      // A ping that fails or gets no answer within the statement bound: the connection is gone, silently or not.
      client.query('select 1 /* keel-wakeups ping */').catch(lost);
    }, this.pingEveryMs);
    this.pingTimer.unref();
  }

  private stopPing(): void {
    clearInterval(this.pingTimer);
    this.pingTimer = undefined;
  }

  // One reconnect pending at a time; whatever was notified while we were away is found by the next poll, and every
  // subscriber is woken once on reconnect too.
  private reconnectLater(): void {
    if (this.closed || this.retryTimer) return;
    const wait = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, 10_000);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.ensure()
        .then(() => this.wakeAll())
        .catch(() => undefined); // connect() scheduled the next attempt
    }, wait);
    this.retryTimer.unref();
  }

  private wakeAll(): void {
    for (const s of this.subs) s.onWake();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.subs.clear();
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.stopPing();
    const c = this.client;
    this.client = undefined;
    await c?.end().catch(() => undefined);
  }
}
