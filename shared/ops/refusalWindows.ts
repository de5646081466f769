// Bounds the audit rows of refused calls (401/403): a flood of bad keys or of a principal without the role must not
// write one keel.ops_audit row per call. Per caller and route (how they signed in, who they are, their address, the
// action and the status) the first refusal of a window is recorded at once, as before; the refusals after it in the
// same window are only counted (each still logged as its "ops audit" line, recorded: false, coalesced: true), and when
// the window closes one more 'refused' row records how many there were. Per process (each instance bounds its own
// rows), claimed synchronously, so refusals arriving together still write exactly one first record.
import type { AuditEntry } from '../jobs/contract.js';

// Distinct callers tracked at once; past it, new callers of a route share one window ("any caller"), so memory stays
// bounded however many addresses a flood comes from.
export const MAX_REFUSAL_WINDOWS = 10_000;

export function refusalKey(e: AuditEntry, anyCaller = false): string {
  const who = anyCaller ? ['*'] : [e.channel, e.authMethod, e.principalId, e.principalName, e.appId, e.clientIp];
  return JSON.stringify([...who, e.action, e.status]);
}

interface Window {
  count: number;
}

export class RefusalWindows {
  private readonly open = new Map<string, Window>();

  // true: the first refusal of its window (record it); false: counted into the open window. onClose runs when the
  // window ends with the number of refusals counted into it, if any.
  admit(entry: AuditEntry, windowMs: number, onClose: (coalesced: number) => void): boolean {
    let key = refusalKey(entry);
    if (!this.open.has(key) && this.open.size >= MAX_REFUSAL_WINDOWS) key = refusalKey(entry, true);
    const w = this.open.get(key);
    if (w) {
      w.count++;
      return false;
    }
    const fresh: Window = { count: 0 };
    this.open.set(key, fresh);
    setTimeout(() => {
      this.open.delete(key);
      if (fresh.count > 0) onClose(fresh.count);
    }, windowMs).unref();
    return true;
  }
}
