// The batch state machine is one table (shared/transfer/lifecycle.ts): the docs show it as it is, the service cannot
// make a move outside it, and the derived state lists agree with the states.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  journalMove,
  MOVES,
  movesTable,
  NOT_COMMITTED,
  OPEN_STATES,
  RECONCILABLE,
} from '../../shared/transfer/lifecycle.js';
import { BATCH_STATES } from '../../shared/transfer/types.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('transfer batch lifecycle (lifecycle.ts)', () => {
  it('docs/transfer.md shows the move table exactly as the code declares it', () => {
    expect(readFileSync(path.join(root, 'docs/transfer.md'), 'utf8')).toContain(movesTable());
  });

  it('the state lists are derived from the states: open = not committed and not failed', () => {
    expect([...OPEN_STATES].sort()).toEqual(['applying', 'extracting', 'staged', 'unresolved']);
    expect([...NOT_COMMITTED].sort()).toEqual([...OPEN_STATES, 'failed'].sort());
    expect(RECONCILABLE.every((s) => OPEN_STATES.includes(s))).toBe(true);
  });

  it('every state but the first is reached by some move, and nothing leaves committed', () => {
    const reached = new Set(Object.values(MOVES).flatMap((m) => m.to));
    expect(BATCH_STATES.filter((s) => s !== 'extracting' && !reached.has(s))).toEqual([]);
    expect(Object.values(MOVES).filter((m) => (m.from as readonly string[]).includes('committed'))).toEqual([]);
  });

  it('a journal move outside its row throws; within it, the defaults are the first to and event', () => {
    expect(journalMove('stage')).toEqual({ from: ['extracting'], to: 'staged', event: 'staged' });
    expect(journalMove('stage', { event: 'already_staged' }).event).toBe('already_staged');
    expect(journalMove('not_applied', { to: 'extracting' }).to).toBe('extracting');
    expect(journalMove('fail', { from: ['extracting'] }).from).toEqual(['extracting']);
    expect(() => journalMove('stage', { to: 'committed' })).toThrow(/stage does not allow/);
    expect(() => journalMove('commit', { event: 'staged' })).toThrow(/commit does not allow/);
    expect(() => journalMove('start_apply', { from: ['committed'] })).toThrow(/start_apply does not allow/);
    // A direct apply (docs/transfer.md) counts its attempt from extracting.
    expect(journalMove('start_apply', { from: ['extracting'] }).to).toBe('applying');
  });
});
