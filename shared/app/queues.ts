// Posting to Azure Storage queues (Azurite locally). Messages are JSON, base64-encoded: the default
// `messageEncoding` of the Functions queue extension (host.json), which the local poller honours too.
import { QueueServiceClient, type QueueClient } from '@azure/storage-queue';
import { DefaultAzureCredential, ManagedIdentityCredential, type TokenCredential } from '@azure/identity';

export interface QueueGateway {
  // Posts a JSON message; delaySeconds makes it invisible for that long (at most 7 days).
  send(queue: string, message: unknown, opts?: { delaySeconds?: number }): Promise<void>;
  // Posts a message to `<queue>-poison` (the Functions host's convention) with the reason it was rejected.
  sendPoison(queue: string, entry: PoisonEntry): Promise<void>;
  // True when the storage account answers.
  ping(): Promise<boolean>;
}

export interface PoisonEntry {
  reason: string;
  detail: string;
  functionName: string;
  message: unknown; // the original message, as received
  dequeueCount?: number;
  at?: string;
}

export const MAX_VISIBILITY_DELAY_SECONDS = 7 * 24 * 3600;

export function poisonQueueName(queue: string): string {
  return `${queue}-poison`;
}

export function encodeMessage(message: unknown): string {
  return Buffer.from(JSON.stringify(message), 'utf8').toString('base64');
}

export interface StorageConnection {
  connectionString?: string; // AzureWebJobsStorage
  queueServiceUri?: string; // AzureWebJobsStorage__queueServiceUri (identity-based connection)
  accountName?: string; // AzureWebJobsStorage__accountName
  clientId?: string; // AzureWebJobsStorage__clientId (user-assigned managed identity)
}

export class StorageQueueGateway implements QueueGateway {
  private readonly clients = new Map<string, Promise<QueueClient>>();

  constructor(private readonly service: QueueServiceClient) {}

  static fromConnection(conn: StorageConnection): StorageQueueGateway {
    if (conn.connectionString) {
      return new StorageQueueGateway(QueueServiceClient.fromConnectionString(conn.connectionString));
    }
    // The endpoint comes from the settings, never from a guessed public-cloud host name (sovereign clouds and
    // private endpoints have other ones): infra/main.bicep sets __queueServiceUri from the account's own endpoints.
    const uri = conn.queueServiceUri;
    if (!uri) {
      throw new Error(
        conn.accountName
          ? 'AzureWebJobsStorage__accountName alone does not say which cloud the account is in: set AzureWebJobsStorage__queueServiceUri to its queue endpoint (https://<account>.queue.<storage suffix>)'
          : 'no storage connection: set AzureWebJobsStorage, or AzureWebJobsStorage__queueServiceUri for a managed identity',
      );
    }
    const credential: TokenCredential = conn.clientId
      ? new ManagedIdentityCredential({ clientId: conn.clientId })
      : new DefaultAzureCredential();
    return new StorageQueueGateway(new QueueServiceClient(uri, credential));
  }

  queue(name: string): Promise<QueueClient> {
    let client = this.clients.get(name);
    if (!client) {
      const q = this.service.getQueueClient(name);
      client = q.createIfNotExists().then(() => q);
      client.catch(() => this.clients.delete(name));
      this.clients.set(name, client);
    }
    return client;
  }

  async send(queue: string, message: unknown, opts: { delaySeconds?: number } = {}): Promise<void> {
    const q = await this.queue(queue);
    const delay = Math.max(0, Math.min(MAX_VISIBILITY_DELAY_SECONDS, Math.ceil(opts.delaySeconds ?? 0)));
    await q.sendMessage(encodeMessage(message), delay > 0 ? { visibilityTimeout: delay } : {});
  }

  async sendPoison(queue: string, entry: PoisonEntry): Promise<void> {
    await this.send(poisonQueueName(queue), { ...entry, at: entry.at ?? new Date().toISOString() });
  }

  async ping(): Promise<boolean> {
    try {
      await this.service.getProperties();
      return true;
    } catch {
      return false;
    }
  }
}
