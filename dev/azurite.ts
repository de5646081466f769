// Azurite's queue service, in-process, for the local host: data under <dir> (or in memory).
// Azurite ships no typings and no package exports; its queue server classes are loaded from their CommonJS files.
import { createRequire } from 'node:module';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';

const require = createRequire(import.meta.url);

interface AzuriteQueueServer {
  start(): Promise<void>;
  close(): Promise<void>;
  getHttpServerAddress(): string;
}

type QueueServerCtor = new (config: unknown) => AzuriteQueueServer;
type QueueConfigurationCtor = new (...args: unknown[]) => unknown;

// The well-known development account every Azure Storage emulator accepts.
export const DEV_ACCOUNT = 'devstoreaccount1';
export const DEV_KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

export interface AzuriteQueue {
  port: number;
  connectionString: string;
  stop(): Promise<void>;
}

export function azuriteConnectionString(host: string, port: number): string {
  return `DefaultEndpointsProtocol=http;AccountName=${DEV_ACCOUNT};AccountKey=${DEV_KEY};QueueEndpoint=http://${host}:${port}/${DEV_ACCOUNT};`;
}

export async function startAzuriteQueue(opts: {
  dir?: string;
  port?: number;
  host?: string;
  inMemory?: boolean;
}): Promise<AzuriteQueue> {
  const host = opts.host ?? '127.0.0.1';
  const QueueServer = (require('azurite/dist/src/queue/QueueServer.js') as { default: QueueServerCtor }).default;
  const QueueConfiguration = (
    require('azurite/dist/src/queue/QueueConfiguration.js') as { default: QueueConfigurationCtor }
  ).default;
  const inMemory = opts.inMemory ?? !opts.dir;
  const dir = opts.dir ? path.resolve(opts.dir) : path.resolve('.data/azurite');
  if (!inMemory) await mkdir(dir, { recursive: true });
  const config = new QueueConfiguration(
    host,
    opts.port ?? 0,
    5, // keep-alive seconds
    path.join(dir, '__azurite_db_queue__.json'),
    path.join(dir, '__azurite_db_queue_extent__.json'),
    [{ locationId: 'Default', locationPath: path.join(dir, '__queuestorage__'), maxConcurrency: 10 }],
    false, // access log
    undefined,
    false, // debug log
    undefined,
    false, // loose
    true, // skipApiVersionCheck: the SDK may speak a newer service version than this Azurite
    '',
    '',
    '',
    undefined, // oauth
    false, // disableProductStyleUrl
    inMemory,
  );
  const server = new QueueServer(config);
  await server.start();
  const address = server.getHttpServerAddress(); // http://127.0.0.1:PORT
  const port = Number(new URL(address).port);
  return {
    port,
    connectionString: azuriteConnectionString(host, port),
    stop: () => server.close(),
  };
}
