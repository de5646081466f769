// With a connection string, initTelemetry() sets up Application Insights (applicationinsights v3 →
// @azure/monitor-opentelemetry) and the facade's metrics and events reach the ingestion endpoint under
// their exact names and dimensions. The endpoint is a local HTTPS server (self-signed certificate made
// with openssl) standing in for Azure Monitor ingestion — the connection string's IngestionEndpoint and
// LiveEndpoint point at it — so nothing leaves the machine.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import https from 'node:https';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import type { AddressInfo } from 'node:net';
import {
  EVENTS,
  flushTelemetry,
  initTelemetry,
  METRICS,
  shutdownTelemetry,
  telemetry,
} from '../../shared/telemetry/index.js';

interface Envelope {
  name: string;
  data?: { baseType?: string; baseData?: Record<string, unknown> };
}

const received: Envelope[] = [];
let server: https.Server;
let endpoint = '';
const savedEnv = { ...process.env };
const certDir = mkdtempSync(path.join(os.tmpdir(), 'keel-telemetry-cert-'));

function selfSignedCertificate(): { key: Buffer; cert: Buffer } {
  const key = path.join(certDir, 'key.pem');
  const cert = path.join(certDir, 'cert.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ],
    { stdio: 'ignore' },
  );
  return { key: readFileSync(key), cert: readFileSync(cert) };
}

beforeAll(async () => {
  server = https.createServer(selfSignedCertificate(), (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url?.includes('/track')) {
        let body = Buffer.concat(chunks);
        if (req.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
        const parsed = JSON.parse(body.toString('utf8')) as Envelope[] | Envelope;
        received.push(...(Array.isArray(parsed) ? parsed : [parsed]));
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ itemsReceived: 1, itemsAccepted: 1, errors: [] }));
        return;
      }
      res.writeHead(200, { 'x-ms-qps-subscribed': 'false' }); // live metrics ping
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  endpoint = `https://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  // The exporter must accept the test server's self-signed certificate (this test process only).
  process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';
  // Look like a Functions host (no VM metadata probe) and keep the SDK's own statistics off the wire.
  process.env.WEBSITE_SITE_NAME = 'keel-telemetry-test';
  process.env.FUNCTIONS_EXTENSION_VERSION = '~4';
  process.env.APPLICATIONINSIGHTS_STATSBEAT_DISABLED = 'true';
  process.env.APPLICATION_INSIGHTS_NO_STATSBEAT = 'true';
  process.env.APPLICATIONINSIGHTS_SDKSTATS_DISABLED = 'true';
});

afterAll(async () => {
  await shutdownTelemetry();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  for (const key of Object.keys(process.env)) if (!(key in savedEnv)) delete process.env[key];
  Object.assign(process.env, savedEnv);
  rmSync(certDir, { recursive: true, force: true });
});

function metricPoints(name: string): { value: number; props: Record<string, string> }[] {
  return received
    .filter((e) => e.data?.baseType === 'MetricData')
    .flatMap((e) => {
      const base = e.data!.baseData as {
        metrics: { name: string; value: number }[];
        properties?: Record<string, string>;
      };
      return base.metrics.filter((m) => m.name === name).map((m) => ({ value: m.value, props: base.properties ?? {} }));
    });
}

describe('with a connection string', () => {
  it('enables Application Insights once and exports the facade metrics and events by name', async () => {
    const env = {
      APPLICATIONINSIGHTS_CONNECTION_STRING: `InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=${endpoint};LiveEndpoint=${endpoint}`,
    };
    expect(initTelemetry(env)).toEqual({ enabled: true });
    expect(initTelemetry(env)).toEqual({ enabled: true }); // idempotent

    telemetry.jobCompleted({ queue: 'mail', type: 'send', durationMs: 12 });
    telemetry.jobDeadLettered({ queue: 'mail', type: 'send', reason: 'exhausted', jobId: 'job-1' });
    telemetry.queueLag({ queue: 'mail', lagMs: 42_000 });
    telemetry.maintenanceRun({ durationMs: 5 });
    telemetry.reconcileOutcome({
      transfer: 'orders',
      outcome: 'unresolved',
      batchId: 'batch-1',
      unresolvedForMs: 1_000,
    });

    await flushTelemetry();
    for (let i = 0; i < 50 && !received.some((e) => e.data?.baseType === 'EventData'); i++) {
      await new Promise((r) => setTimeout(r, 100));
    }

    expect(metricPoints(METRICS.jobsCompleted)).toEqual([{ value: 1, props: { queue: 'mail', type: 'send' } }]);
    expect(metricPoints(METRICS.jobsDeadLettered)).toEqual([
      { value: 1, props: { queue: 'mail', type: 'send', reason: 'exhausted' } },
    ]);
    expect(metricPoints(METRICS.queueLag)).toEqual([{ value: 42_000, props: { queue: 'mail' } }]);
    expect(metricPoints(METRICS.maintenanceRuns)).toEqual([{ value: 1, props: { outcome: 'succeeded' } }]);

    const events = received
      .filter((e) => e.data?.baseType === 'EventData')
      .map((e) => e.data!.baseData as { name: string; properties?: Record<string, string> });
    expect(events).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          name: EVENTS.jobDeadLettered,
          properties: expect.objectContaining({ jobId: 'job-1', queue: 'mail', reason: 'exhausted' }),
        }),
        expect.objectContaining({
          name: EVENTS.batchUnresolved,
          properties: expect.objectContaining({ batchId: 'batch-1', transfer: 'orders', unresolvedForMs: '1000' }),
        }),
      ]),
    );
  });
});
