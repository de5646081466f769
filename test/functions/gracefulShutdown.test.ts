// shared/app/shutdown.ts on its own (test/deploy/appTerminate.test.ts runs it in the built app against a database):
// the hook and SIGTERM share one stop, every live processor gets the grace period, telemetry is flushed after them,
// a processor that appears during the stop is stopped at once, and SIGTERM still ends the process afterwards.
import { describe, expect, it } from 'vitest';
import { installGracefulShutdown, liveProcessorCount, registerLiveProcessor } from '../../shared/app/shutdown.js';

describe('graceful shutdown wiring', () => {
  it('stops every live processor once, then flushes; SIGTERM re-raises itself after the same stop', async () => {
    const order: string[] = [];
    const processor = (name: string) => ({
      async shutdown(graceMs: number) {
        order.push(`${name} ${graceMs}`);
        await new Promise((r) => setTimeout(r, 20));
        order.push(`${name} stopped`);
      },
    });
    registerLiveProcessor(processor('a'));
    const forgetB = registerLiveProcessor(processor('b'));
    registerLiveProcessor(processor('c'));
    forgetB(); // a closed runtime's processor is not stopped again
    expect(liveProcessorCount()).toBe(2);

    let hook: (() => Promise<void>) | undefined;
    const signals: Record<string, () => void> = {};
    const killed: [number, string][] = [];
    installGracefulShutdown(
      {
        appTerminate: (h) => (hook = h),
        process: {
          pid: 4242,
          once: ((event: string, listener: () => void) => {
            signals[event] = listener;
          }) as NodeJS.Process['once'],
          kill: ((pid: number, signal: string) => {
            killed.push([pid, signal]);
            return true;
          }) as NodeJS.Process['kill'],
        },
      },
      { graceMs: 1234, after: async () => void order.push('flushed') },
    );
    expect(hook).toBeTypeOf('function');
    expect(Object.keys(signals)).toEqual(['SIGTERM']);

    const first = hook!();
    signals.SIGTERM!(); // both arrive: one stop
    await first;
    await new Promise((r) => setTimeout(r, 10));
    expect(order).toEqual(['a 1234', 'c 1234', 'a stopped', 'c stopped', 'flushed']);
    expect(killed).toEqual([[4242, 'SIGTERM']]);

    // A runtime created by a late invocation: its processor is stopped at once, without a grace period.
    const late: number[] = [];
    registerLiveProcessor({ shutdown: async (ms) => void late.push(ms) });
    expect(late).toEqual([0]);
  });
});
