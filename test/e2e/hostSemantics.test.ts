// The local host's queue and timer semantics, in-process against Azurite: host.json maxDequeueCount -> poison
// queue, visibilityTimeout between attempts, batchSize-bounded concurrency, base64 messages, and timers firing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QueueServiceClient } from '@azure/storage-queue';
import { startAzuriteQueue, type AzuriteQueue } from '../../dev/azurite.js';
import { localHostId, startLocalHost, type RunningLocalHost } from '../../dev/localHost.js';
import { timerLockQueueName } from '../../dev/timerLock.js';
import { hostConfigFrom } from '../../shared/app/hostJson.js';
import { parseSettings } from '../../shared/config/settings.js';
import { encodeMessage } from '../../shared/app/queues.js';
import type { FunctionDefinition } from '../../functions/definitions.js';
import { until } from '../support/until.js';

let azurite: AzuriteQueue;
let host: RunningLocalHost;
let svc: QueueServiceClient;
const seen: { value: unknown; dequeueCount: unknown }[] = [];
let concurrent = 0;
let maxConcurrent = 0;
let ticks = 0;

const settings = parseSettings({
  KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/unused',
  KEEL_JOBS_QUEUE: 'sem-jobs',
  KEEL_TRANSFER_STAGE_QUEUE: 'sem-stage',
  KEEL_DISPATCH_SCHEDULE: '*/1 * * * * *',
});

const definitions: FunctionDefinition[] = [
  {
    name: 'flaky',
    kind: 'queue',
    queueSetting: 'KEEL_JOBS_QUEUE',
    connection: 'AzureWebJobsStorage',
    handler: async (value, ctx) => {
      seen.push({ value, dequeueCount: ctx.triggerMetadata?.dequeueCount });
      if ((value as { fail?: boolean }).fail) throw new Error('always fails');
    },
  },
  {
    name: 'slow',
    kind: 'queue',
    queueSetting: 'KEEL_TRANSFER_STAGE_QUEUE',
    connection: 'AzureWebJobsStorage',
    handler: async () => {
      concurrent++;
      maxConcurrent = Math.max(maxConcurrent, concurrent);
      await new Promise((r) => setTimeout(r, 300));
      concurrent--;
    },
  },
  {
    name: 'tick',
    kind: 'timer',
    scheduleSetting: 'KEEL_DISPATCH_SCHEDULE',
    runOnStartup: false,
    handler: async () => void ticks++,
  },
];

beforeAll(async () => {
  azurite = await startAzuriteQueue({ inMemory: true, port: 0 });
  svc = QueueServiceClient.fromConnectionString(azurite.connectionString);
  host = await startLocalHost({
    definitions,
    settings,
    hostConfig: hostConfigFrom({
      version: '2.0',
      extensions: {
        queues: {
          batchSize: 4,
          newBatchThreshold: 0,
          maxDequeueCount: 3,
          visibilityTimeout: '00:00:00',
          maxPollingInterval: '00:00:00.200',
        },
      },
    }),
    queueService: svc,
    opsKey: 'k'.repeat(32),
    port: 0,
    log: () => undefined,
  });
}, 60_000);

afterAll(async () => {
  await host?.stop();
  await azurite?.stop();
});

describe('local host semantics', () => {
  it('delivers base64 JSON parsed, and poisons a message after maxDequeueCount failed attempts', async () => {
    await svc.getQueueClient('sem-jobs').sendMessage(encodeMessage({ ok: 1 }));
    await svc.getQueueClient('sem-jobs').sendMessage(encodeMessage({ fail: true }));
    const poison = svc.getQueueClient('sem-jobs-poison');
    const moved = await until(
      'the failing message in the poison queue',
      async () => {
        const p = await poison.peekMessages({ numberOfMessages: 5 });
        return p.peekedMessageItems.length === 1 ? p.peekedMessageItems[0]! : null;
      },
      20_000,
    );
    expect(JSON.parse(Buffer.from(moved.messageText, 'base64').toString())).toEqual({ fail: true });
    const failing = seen.filter((s) => (s.value as { fail?: boolean }).fail);
    expect(failing.map((s) => s.dequeueCount)).toEqual([1, 2, 3]);
    expect(seen.some((s) => (s.value as { ok?: number }).ok === 1)).toBe(true);
    const left = await svc.getQueueClient('sem-jobs').peekMessages({ numberOfMessages: 5 });
    expect(left.peekedMessageItems).toHaveLength(0);
  });

  it('runs at most batchSize (+ newBatchThreshold) messages at once', async () => {
    const q = svc.getQueueClient('sem-stage');
    for (let i = 0; i < 10; i++) await q.sendMessage(encodeMessage({ i }));
    await until(
      'all ten processed',
      async () => {
        const p = await q.peekMessages({ numberOfMessages: 32 });
        return p.peekedMessageItems.length === 0 && concurrent === 0;
      },
      20_000,
    );
    expect(maxConcurrent).toBeGreaterThan(1);
    expect(maxConcurrent).toBeLessThanOrEqual(4);
  });

  it('fires timers on their schedule', async () => {
    const start = ticks;
    await until('two timer ticks', async () => ticks - start >= 2, 5000);
  });
});

describe('local host wake-ups', () => {
  it('runs the woken timer at once, never twice at the same time, and once more for wake-ups during a run', async () => {
    let runs = 0;
    let running = 0;
    let overlap = false;
    let wake: () => void = () => undefined;
    let unsubscribed = false;
    const yearly = parseSettings({
      KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/unused',
      KEEL_DISPATCH_SCHEDULE: '0 0 0 1 1 *',
    });
    const woken = await startLocalHost({
      definitions: [
        {
          name: 'dispatcher',
          kind: 'timer',
          scheduleSetting: 'KEEL_DISPATCH_SCHEDULE',
          runOnStartup: false,
          handler: async () => {
            runs++;
            overlap ||= running > 0;
            running++;
            await new Promise((r) => setTimeout(r, 200));
            running--;
          },
        },
      ],
      settings: yearly,
      hostConfig: hostConfigFrom({ version: '2.0' }),
      queueService: svc,
      opsKey: 'k'.repeat(32),
      port: 0,
      log: () => undefined,
      wakeups: {
        timer: 'dispatcher',
        source: {
          async subscribe(queues, onWake) {
            expect(queues).toEqual([]); // every queue
            wake = onWake;
            return async () => void (unsubscribed = true);
          },
        },
      },
    });
    try {
      wake();
      await until('the woken run', async () => runs === 1, 5000);
      wake(); // during the run: one more run afterwards, however many arrive
      wake();
      await until('the follow-up run', async () => runs === 2, 5000);
      await new Promise((r) => setTimeout(r, 500));
      expect(runs).toBe(2);
      expect(overlap).toBe(false);
    } finally {
      await woken.stop();
    }
    expect(unsubscribed).toBe(true);
  });
});

// Azure runs a timer function as a singleton across the app's instances (the lock is in the storage account) and never
// overlapping itself; two local hosts of one app, on the same storage, do the same.
describe('timers across local instances', () => {
  it('two instances never run the same timer at once, on schedule or woken, and both can run it', async () => {
    const everySecond = parseSettings({
      KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/singleton',
      KEEL_DISPATCH_SCHEDULE: '* * * * * *',
    });
    let running = 0;
    let overlaps = 0;
    const runsBy: Record<string, number> = { a: 0, b: 0 };
    const wakes: Record<string, () => void> = {};
    const start = (instance: 'a' | 'b') =>
      startLocalHost({
        definitions: [
          {
            name: 'dispatcher',
            kind: 'timer',
            scheduleSetting: 'KEEL_DISPATCH_SCHEDULE',
            runOnStartup: true,
            // Longer than the schedule's interval: every firing meets a run in progress somewhere.
            handler: async () => {
              runsBy[instance]!++;
              if (running > 0) overlaps++;
              running++;
              await new Promise((r) => setTimeout(r, 1300));
              running--;
            },
          },
        ],
        settings: everySecond,
        hostConfig: hostConfigFrom({ version: '2.0' }),
        queueService: svc,
        opsKey: 'k'.repeat(32),
        port: 0,
        log: () => undefined,
        wakeups: {
          timer: 'dispatcher',
          source: {
            async subscribe(_queues, onWake) {
              wakes[instance] = onWake;
              return async () => undefined;
            },
          },
        },
      });
    const a = await start('a');
    const b = await start('b');
    try {
      const deadline = Date.now() + 8000;
      while (Date.now() < deadline) {
        wakes.a?.();
        wakes.b?.();
        await new Promise((r) => setTimeout(r, 150));
      }
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
    expect(overlaps).toBe(0);
    // About one run per 1.3 s across both instances, with the lock passing between them (each release lets the next
    // firing anywhere take it).
    expect(runsBy.a! + runsBy.b!).toBeGreaterThanOrEqual(3);
    expect(running).toBe(0);
  }, 30_000);

  it('a single instance never overlaps a timer with itself: schedule, start-up run and wake-ups share one gate', async () => {
    const everySecond = parseSettings({
      KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/gate',
      KEEL_DISPATCH_SCHEDULE: '* * * * * *',
    });
    let running = 0;
    let overlaps = 0;
    let runs = 0;
    let wake: () => void = () => undefined;
    const one = await startLocalHost({
      definitions: [
        {
          name: 'dispatcher',
          kind: 'timer',
          scheduleSetting: 'KEEL_DISPATCH_SCHEDULE',
          runOnStartup: true,
          handler: async () => {
            runs++;
            if (running > 0) overlaps++;
            running++;
            await new Promise((r) => setTimeout(r, 700));
            running--;
          },
        },
      ],
      settings: everySecond,
      hostConfig: hostConfigFrom({ version: '2.0' }),
      queueService: svc,
      opsKey: 'k'.repeat(32),
      port: 0,
      log: () => undefined,
      timerLocks: false, // the in-instance gate alone
      wakeups: {
        timer: 'dispatcher',
        source: {
          async subscribe(_queues, onWake) {
            wake = onWake;
            return async () => undefined;
          },
        },
      },
    });
    try {
      const deadline = Date.now() + 4000;
      while (Date.now() < deadline) {
        wake();
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await one.stop();
    }
    expect(overlaps).toBe(0);
    expect(runs).toBeGreaterThanOrEqual(3);
  }, 20_000);
});

describe('useMonitor on the local host', () => {
  it('an hourly timer whose occurrence was missed while no instance ran fires once at start, past due', async () => {
    const hourly = parseSettings({
      KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/monitor',
      KEEL_MAINTENANCE_SCHEDULE: '0 0 * * * *',
    });
    const calls: { isPastDue: boolean; last: string }[] = [];
    const start = (runOnStartup: boolean) =>
      startLocalHost({
        definitions: [
          {
            name: 'maintenance',
            kind: 'timer',
            scheduleSetting: 'KEEL_MAINTENANCE_SCHEDULE',
            runOnStartup,
            handler: async (timer) => {
              calls.push({ isPastDue: timer.isPastDue, last: timer.scheduleStatus.last });
            },
          },
        ],
        settings: hourly,
        hostConfig: hostConfigFrom({ version: '2.0' }),
        queueService: svc,
        opsKey: 'k'.repeat(32),
        port: 0,
        log: () => undefined,
      });
    // First instance: runs at start-up (not past due) and records the status: next = the coming hour.
    const first = await start(true);
    await until('the start-up run', async () => calls.length === 1, 5000);
    await first.stop();
    expect(calls[0]!.isPastDue).toBe(false);
    // Nothing ran at the recorded next occurrence (the app was down): make it an hour ago.
    const lock = svc.getQueueClient(timerLockQueueName(localHostId({ settings: hourly }), 'maintenance'));
    const token = (await lock.receiveMessages({ numberOfMessages: 1, visibilityTimeout: 5 })).receivedMessageItems[0]!;
    const status = JSON.parse(token.messageText) as { last: string; next: string };
    expect(Date.parse(status.next)).toBeGreaterThan(Date.now());
    const missed = { last: status.last, next: new Date(Date.now() - 3600_000).toISOString() };
    await lock.updateMessage(token.messageId, token.popReceipt, JSON.stringify(missed), 0);
    // The next instance fires it once at start, past due; its status then says the coming hour again.
    const second = await start(false);
    try {
      await until('the past-due run', async () => calls.length === 2, 5000);
      await new Promise((r) => setTimeout(r, 500));
      expect(calls).toHaveLength(2);
      expect(calls[1]).toEqual({ isPastDue: true, last: status.last });
    } finally {
      await second.stop();
    }
    const peeked = (await lock.peekMessages({ numberOfMessages: 1 })).peekedMessageItems[0]!;
    expect(Date.parse((JSON.parse(peeked.messageText) as { next: string }).next)).toBeGreaterThan(Date.now());
  }, 30_000);
});
