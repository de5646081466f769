// host.json functionTimeout in the local host, as the Functions host enforces it on a Node app: an invocation past the
// timeout has failed (FunctionTimeoutException) whatever the function does afterwards. A queue message is retried and
// poisoned at maxDequeueCount exactly as for a thrown error (its late completion does not delete it), a timer run
// fails and the next one runs, an HTTP caller gets a 500; an invocation within the timeout is untouched.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QueueServiceClient } from '@azure/storage-queue';
import { startAzuriteQueue, type AzuriteQueue } from '../../dev/azurite.js';
import { startLocalHost, type RunningLocalHost } from '../../dev/localHost.js';
import { hostConfigFrom } from '../../shared/app/hostJson.js';
import { parseSettings } from '../../shared/config/settings.js';
import { encodeMessage } from '../../shared/app/queues.js';
import { until } from '../functions/support.js';
import type { FunctionDefinition } from '../../functions/definitions.js';

let azurite: AzuriteQueue;
let host: RunningLocalHost;
let svc: QueueServiceClient;
const lines: string[] = [];
const queueCalls: { value: { hang: boolean }; dequeueCount: unknown }[] = [];
let timerRuns = 0;
let wake: () => void = () => undefined;
// The hung functions finish (late) when the test ends, so nothing is left running.
let release!: () => void;
const released = new Promise<void>((r) => (release = r));

const settings = parseSettings({
  KEEL_PG_URL: 'postgres://unused@127.0.0.1:1/unused',
  KEEL_JOBS_QUEUE: 'ft-jobs',
  KEEL_DISPATCH_SCHEDULE: '0 0 0 1 1 *', // never during the test: the timer runs at start and when woken
});

const definitions: FunctionDefinition[] = [
  {
    name: 'runner',
    kind: 'queue',
    queueSetting: 'KEEL_JOBS_QUEUE',
    connection: 'AzureWebJobsStorage',
    handler: async (value, ctx) => {
      queueCalls.push({ value: value as { hang: boolean }, dequeueCount: ctx.triggerMetadata?.dequeueCount });
      if ((value as { hang: boolean }).hang) await released; // then "succeeds": too late, the message stays failed
    },
  },
  {
    name: 'dispatcher',
    kind: 'timer',
    scheduleSetting: 'KEEL_DISPATCH_SCHEDULE',
    runOnStartup: true,
    handler: async () => {
      timerRuns++;
      await released;
    },
  },
  {
    name: 'slowHttp',
    kind: 'http',
    route: 'slow/{ms}',
    methods: ['GET'],
    authLevel: 'anonymous',
    handler: async (req) => {
      const ms = Number(req.params.ms);
      await Promise.race([released, new Promise((r) => setTimeout(r, ms))]);
      return { status: 200, jsonBody: { slept: ms } };
    },
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
      functionTimeout: '00:00:00.400',
      extensions: {
        queues: { maxDequeueCount: 2, visibilityTimeout: '00:00:00', maxPollingInterval: '00:00:00.100' },
      },
    }),
    queueService: svc,
    timerLocks: false,
    wakeups: {
      timer: 'dispatcher',
      source: {
        subscribe: async (_queues, onWake) => {
          wake = onWake;
          return async () => undefined;
        },
      },
    },
    opsKey: 'k'.repeat(32),
    port: 0,
    log: (line) => lines.push(line),
  });
}, 60_000);

afterAll(async () => {
  release();
  await host?.stop();
  await azurite?.stop();
});

describe('host.json functionTimeout on the local host', () => {
  it('a queue invocation past it fails: retried, then poisoned at maxDequeueCount; one within it completes', async () => {
    const q = svc.getQueueClient('ft-jobs');
    await q.sendMessage(encodeMessage({ hang: true }));
    await q.sendMessage(encodeMessage({ hang: false }));
    const poison = svc.getQueueClient('ft-jobs-poison');
    const moved = await until(
      'the hung message in the poison queue',
      async () => {
        const p = await poison.peekMessages({ numberOfMessages: 5 });
        return p.peekedMessageItems.length > 0 ? p.peekedMessageItems : null;
      },
      20_000,
    );
    expect(moved.map((m) => JSON.parse(Buffer.from(m.messageText, 'base64').toString()))).toEqual([{ hang: true }]);
    expect(queueCalls.filter((c) => c.value.hang).map((c) => c.dequeueCount)).toEqual([1, 2]);
    expect(queueCalls.filter((c) => !c.value.hang)).toHaveLength(1);
    expect((await q.peekMessages({ numberOfMessages: 5 })).peekedMessageItems).toHaveLength(0);
    const failed = lines.filter((l) => l.includes('runner error: function failed'));
    expect(failed).toHaveLength(2);
    expect(failed[0]).toContain('Timeout value of 00:00:00.400 was exceeded by function: Functions.runner');
  });

  it('a timer run past it fails, and the timer runs again', async () => {
    await until(
      'the start-up run timed out',
      async () => lines.some((l) => l.includes("exceeded by function 'Functions.dispatcher'")),
      20_000,
    );
    expect(lines.some((l) => l.includes('dispatcher error: timer function failed: FunctionTimeoutException'))).toBe(
      true,
    );
    // The run that timed out no longer holds the timer (it runs on, detached): a wake-up runs the timer again at
    // once. (Were the run still holding it, the wake-up would only be queued behind it.)
    expect(timerRuns).toBe(1);
    wake();
    await until('a second run', async () => timerRuns === 2, 20_000);
  });

  it('an HTTP invocation past it answers 500; one within it answers', async () => {
    const slow = await fetch(`${host.baseUrl}/api/slow/30000`);
    expect(slow.status).toBe(500);
    expect(await slow.json()).toMatchObject({
      message: 'Timeout value of 00:00:00.400 was exceeded by function: Functions.slowHttp',
    });
    const fast = await fetch(`${host.baseUrl}/api/slow/10`);
    expect(fast.status).toBe(200);
    expect(await fast.json()).toEqual({ slept: 10 });
  });
});
