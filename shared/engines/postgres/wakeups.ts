// LISTEN/NOTIFY wake-ups for workers on PostgreSQL: keel.enqueue_many notifies channel keel_jobs with the queue name
// of every queue that got a due job, at commit. One dedicated connection per subscriber; when it drops, it is
// re-opened with backoff, and the worker's polling covers the gap (polling is always the fallback).
import pg from 'pg';
import type { WakeupSource } from '../../jobs/contract.js';

export const WAKEUP_CHANNEL = 'keel_jobs';

export class PostgresWakeups implements WakeupSource {
  private closed = false;
  private readonly subs = new Set<{ queues: Set<string>; onWake: () => void }>();
  private client: pg.Client | undefined;
  private connecting: Promise<void> | undefined;
  private retryMs = 100;

  constructor(private readonly url: string) {}

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
    const client = new pg.Client({ connectionString: this.url, application_name: 'keel-wakeups' });
    const lost = () => {
      if (this.client !== client) return;
      this.client = undefined;
      client.end().catch(() => undefined);
      if (this.closed) return;
      const wait = this.retryMs;
      this.retryMs = Math.min(this.retryMs * 2, 10_000);
      // Whatever was notified while we were away is found by the next poll; wake everyone once on reconnect too.
      setTimeout(
        () =>
          void this.ensure()
            .then(() => this.wakeAll())
            .catch(() => undefined),
        wait,
      ).unref();
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', (n) => {
      if (n.channel !== WAKEUP_CHANNEL) return;
      for (const s of this.subs) if (s.queues.size === 0 || !n.payload || s.queues.has(n.payload)) s.onWake();
    });
    await client.connect();
    await client.query(`listen ${WAKEUP_CHANNEL}`);
    this.client = client;
    this.retryMs = 100;
  }

  private wakeAll(): void {
    for (const s of this.subs) s.onWake();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.subs.clear();
    const c = this.client;
    this.client = undefined;
    await c?.end().catch(() => undefined);
  }
}
