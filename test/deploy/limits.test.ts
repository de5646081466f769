// Deployment limits the app enforces itself: a handler's timeoutMs must fit host.json functionTimeout, and the
// queue client takes its endpoint from the settings (never a guessed public-cloud host name).
import { describe, expect, it } from 'vitest';
import path from 'node:path';
import { HandlerRegistry, TIMEOUT_MARGIN_MS } from '../../shared/jobs/registry.js';
import { appFunctionTimeoutMs, readHostConfig } from '../../shared/app/hostJson.js';
import { StorageQueueGateway } from '../../shared/app/queues.js';

const noop = async () => undefined;

describe('handler timeouts against functionTimeout', () => {
  it('reads functionTimeout from the app host.json', () => {
    const fromFile = readHostConfig(path.resolve(import.meta.dirname, '../../host.json')).functionTimeoutMs;
    expect(fromFile).toBe(10 * 60_000);
    expect(appFunctionTimeoutMs()).toBe(fromFile);
  });

  it('refuses at registration a timeoutMs that would outlive the invocation, naming the limit', () => {
    const registry = new HandlerRegistry({ functionTimeoutMs: 10 * 60_000 });
    const max = 10 * 60_000 - TIMEOUT_MARGIN_MS;
    expect(() => registry.register('fits', noop, { timeoutMs: max })).not.toThrow();
    expect(registry.get('fits')?.options.timeoutMs).toBe(max);
    expect(() => registry.register('too-long', noop, { timeoutMs: max + 1 })).toThrow(
      new RegExp(
        `handler "too-long": timeoutMs ${max + 1} does not fit host.json functionTimeout \\(600000 ms\\).*timeoutMs <= ${max}`,
      ),
    );
    expect(registry.get('too-long')).toBeUndefined();
    expect(() => registry.register('bad', noop, { timeoutMs: 0 })).toThrow(
      /handler "bad": timeoutMs must be an integer/,
    );
    // The default timeout (5 min) must itself fit a short functionTimeout, or registration says so.
    expect(() => new HandlerRegistry({ functionTimeoutMs: 2 * 60_000 }).register('default', noop)).toThrow(
      /timeoutMs 300000 does not fit/,
    );
  });

  it('puts no bound where there is no functionTimeout', () => {
    expect(() => new HandlerRegistry().register('long', noop, { timeoutMs: 24 * 3600_000 })).not.toThrow();
  });
});

describe('storage queue endpoint', () => {
  it('comes from AzureWebJobsStorage__queueServiceUri, whatever the cloud', () => {
    const gw = StorageQueueGateway.fromConnection({
      queueServiceUri: 'https://acct.queue.core.chinacloudapi.cn',
      clientId: '00000000-0000-0000-0000-000000000001',
    });
    expect((gw as unknown as { service: { url: string } }).service.url).toMatch(
      /^https:\/\/acct\.queue\.core\.chinacloudapi\.cn\/?$/,
    );
  });

  it('is never guessed from an account name alone', () => {
    expect(() => StorageQueueGateway.fromConnection({ accountName: 'acct' })).toThrow(
      /AzureWebJobsStorage__queueServiceUri/,
    );
    expect(() => StorageQueueGateway.fromConnection({})).toThrow(/no storage connection/);
  });
});
