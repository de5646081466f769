// The local host's timer singleton, as Azure has it: a timer function runs on one instance at a time across every
// instance of the app, the lock living in the storage account the instances share (in Azure a blob lease under
// azure-webjobs-hosts/locks/<hostId>/; here Azurite has only its queue service, so the lock is a queue holding one
// token message). Holding the lock = holding the token invisible: receive it with a lease-long visibility timeout,
// renew it while the function runs, make it visible again when it ends. An instance that dies holding it loses it
// when the visibility timeout passes, as a blob lease expires. Only the instance whose create made the queue posts
// the token, so racing instances cannot post two. The token's text carries useMonitor's schedule status.
import { createHash } from 'node:crypto';
import type { QueueClient, QueueServiceClient } from '@azure/storage-queue';

// useMonitor's schedule status, kept with the lock as Azure keeps it in the storage account: the last run and the
// occurrence due next (ISO dates).
export interface ScheduleStatus {
  last: string;
  next: string;
}

export interface TimerLockHandle {
  // The status the last holder left (null: none yet).
  status: ScheduleStatus | null;
  // Gives the lock back, with the new status when the timer is monitored.
  release(status?: ScheduleStatus): Promise<void>;
}

export interface TimerLock {
  // null: another instance holds it (this firing is skipped, as on an Azure instance that is not the timer's primary).
  tryAcquire(): Promise<TimerLockHandle | null>;
  // The status without taking the lock (the start-up check for a missed occurrence).
  peekStatus(): Promise<ScheduleStatus | null>;
}

function parseStatus(text: string): ScheduleStatus | null {
  try {
    const v = JSON.parse(text) as Partial<ScheduleStatus>;
    return typeof v.last === 'string' && typeof v.next === 'string' ? { last: v.last, next: v.next } : null;
  } catch {
    return null; // the token as first posted
  }
}

const LEASE_SECONDS = 15;
const RENEW_MS = 5_000;

// One name per app and timer: the app is its database and its jobs queue (two local instances of the same app share
// both); queue names are lowercase letters, digits and single hyphens, at most 63 characters.
export function timerLockQueueName(hostId: string, timer: string): string {
  const id = createHash('sha256').update(hostId).digest('hex').slice(0, 12);
  const name = timer
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
  return `keel-lock-${id}-${name}`.slice(0, 63).replace(/-+$/, '');
}

export class QueueTimerLock implements TimerLock {
  private readonly queue: QueueClient;
  private ready: Promise<void> | undefined;

  constructor(service: QueueServiceClient, queueName: string) {
    this.queue = service.getQueueClient(queueName);
  }

  private ensure(): Promise<void> {
    this.ready ??= (async () => {
      const created = await this.queue.createIfNotExists();
      // Only the creator posts the token (never expiring); every other instance finds it there.
      if (created.succeeded) await this.queue.sendMessage('timer-lock', { messageTimeToLive: -1 });
    })();
    this.ready.catch(() => (this.ready = undefined)); // storage down: retried at the next firing
    return this.ready;
  }

  async tryAcquire(): Promise<TimerLockHandle | null> {
    await this.ensure();
    const got = await this.queue.receiveMessages({ numberOfMessages: 1, visibilityTimeout: LEASE_SECONDS });
    const token = got.receivedMessageItems[0];
    if (!token) return null;
    let popReceipt = token.popReceipt;
    let text = token.messageText;
    let renewing = Promise.resolve();
    const renew = setInterval(() => {
      renewing = this.queue
        .updateMessage(token.messageId, popReceipt, undefined, LEASE_SECONDS)
        .then((r) => {
          if (r.popReceipt) popReceipt = r.popReceipt;
        })
        .catch(() => undefined);
    }, RENEW_MS);
    renew.unref();
    let released: Promise<void> | undefined;
    return {
      status: parseStatus(text),
      release: (status?: ScheduleStatus) => {
        released ??= (async () => {
          clearInterval(renew);
          await renewing;
          if (status) text = JSON.stringify(status);
          // Visible again at once: the next firing on any instance may take it.
          await this.queue.updateMessage(token.messageId, popReceipt, text, 0).catch(() => undefined);
        })();
        return released;
      },
    };
  }

  async peekStatus(): Promise<ScheduleStatus | null> {
    await this.ensure();
    const peeked = await this.queue.peekMessages({ numberOfMessages: 1 });
    const token = peeked.peekedMessageItems[0];
    return token ? parseStatus(token.messageText) : null;
  }
}
