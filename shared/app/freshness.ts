// The transfer freshness gauge (keel.transfer.freshness): behind since when, and how many rows.
import { telemetry } from '../telemetry/index.js';
import type { Logger } from './enqueue.js';
import type { Runtime } from './runtime.js';
import type { TimerStep } from './transferSchedule.js';

// Rows behind for the gauge (KEEL_TRANSFER_ROWS_BEHIND_CAP; 0: not counted): null when not counted or the count
// failed, which leaves the freshness report itself as it is.
export async function countRowsBehind(rt: Runtime, transfer: string, log: Logger): Promise<number | null> {
  const cap = rt.settings.KEEL_TRANSFER_ROWS_BEHIND_CAP;
  if (!rt.transfers || cap === 0) return null;
  try {
    return (await rt.transfers.rowsBehind(transfer, cap))?.rows ?? null;
  } catch (err) {
    log.warn(`transfer ${transfer}: rows behind not counted: ${(err as Error).message}`);
    return null;
  }
}

// The freshness gauge after a timer pass: caught up when the pass found nothing new; otherwise behind since the
// transfer's last commit (never committed: since this process first saw it behind), with the rows behind counted
// at the source. Paused transfers are left out.
const firstBehind = new Map<string, number>();

// The gauge measures behindSince against the host's clock (`now`), and committedAt is a stamp of the journal's
// (`journal`: its now at this pass): the commit is moved onto the host's clock, so that the gauge says the journal's
// age of the commit whatever the skew between them (test/functions/transferClockSkew.test.ts).
export async function reportFreshness(
  rt: Runtime,
  steps: TimerStep[],
  now: Date,
  journal: Date,
  log: Logger,
): Promise<void> {
  const service = rt.transfers!;
  try {
    const states = new Map((await service.transferStates(now.getTime())).map((x) => [x.name, x]));
    for (const step of steps) {
      if (step.action === 'paused') continue;
      if (step.action === 'nothing_new') {
        telemetry.transferFreshness({ transfer: step.transfer, behindSince: null });
        continue;
      }
      const committedAt = states.get(step.transfer)?.lastCommitted?.committedAt;
      if (!committedAt && !firstBehind.has(step.transfer)) firstBehind.set(step.transfer, now.getTime());
      telemetry.transferFreshness({
        transfer: step.transfer,
        behindSince: committedAt
          ? Date.parse(committedAt) + (now.getTime() - journal.getTime())
          : firstBehind.get(step.transfer)!,
        rowsBehind: await countRowsBehind(rt, step.transfer, log),
      });
    }
  } catch (err) {
    log.warn(`transfer timer: freshness not reported: ${(err as Error).message}`);
  }
}
