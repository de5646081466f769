// Demo job types for `npm start` and the demo script: they show archive, retry, dead-letter and cancel paths.
import type { HandlerRegistry } from '../shared/jobs/registry.js';
import { FatalError } from '../shared/jobs/handlerErrors.js';

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        reject(signal.reason);
      },
      { once: true },
    );
  });

export interface DemoPayload {
  message?: string;
  ms?: number; // demo.slow: how long to work
  failTimes?: number; // demo.flaky: attempts that fail before one succeeds
}

export function registerDemoHandlers(registry: HandlerRegistry): HandlerRegistry {
  return registry
    .register<DemoPayload>('demo.echo', async (payload, ctx) => {
      ctx.log.info('echo', { message: payload?.message ?? null }); // kept with the job: its page shows the log
      return { echoed: payload?.message ?? null }; // stored with the archived job: its page shows the result
    })
    .register<DemoPayload>(
      'demo.slow',
      async (payload, ctx) => {
        // Works in ten steps, reporting each: the console shows a running demo.slow job's progress.
        const total = Math.min(Math.max(payload?.ms ?? 5000, 0), 9 * 60_000);
        for (let step = 1; step <= 10; step++) {
          await sleep(total / 10, ctx.signal);
          ctx.progress({ done: step, total: 10, note: `step ${step} of 10` });
        }
      },
      { timeoutMs: 9 * 60_000 + 30_000 },
    ) // fits host.json functionTimeout (10 min) less TIMEOUT_MARGIN_MS
    .register<DemoPayload>(
      'demo.flaky',
      async (payload, ctx) => {
        const failTimes = payload?.failTimes ?? 2;
        if (ctx.attempt <= failTimes)
          throw new Error(`flaky failure on attempt ${ctx.attempt} of ${failTimes + 1} needed`);
      },
      { backoff: { baseMs: 500, maxMs: 5000 } },
    )
    .register<DemoPayload>('demo.fatal', async (payload) => {
      throw new FatalError(payload?.message ?? 'this job always fails fatally');
    });
}
