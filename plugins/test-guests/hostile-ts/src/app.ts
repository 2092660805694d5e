// A hostile placement policy: what it does depends on the request's round.
// - round 1: loops forever (the deadline must stop it);
// - round 2: allocates without bound (the memory cap must stop it);
// - round 3: throws (a trap, with the message on stderr);
// - round 4: looks at the clocks and randomness and whatever of a
//   filesystem or environment the engine offers, and reports what it saw in
//   the detail of every unplaced task;
// - any other round: answers validly (every task deferred).
import { exportPlacement } from '@paceline/plugin-sdk';
import type { PlacementRequest, PlacementResult } from '@paceline/plugin-sdk';

function look(): string {
  const g = globalThis as Record<string, unknown>;
  const env = typeof g.process === 'object' ? 'process' : 'none';
  let fetched = 'none';
  if (typeof g.fetch === 'function') fetched = 'fetch';
  return `wall=${Date.now()} mono=${typeof performance === 'object' ? performance.now() : -1} env=${env} fs=${fetched} rand=${Math.floor(Math.random() * 2 ** 32)}`;
}

export const place = exportPlacement({
  place(request: PlacementRequest): PlacementResult {
    const r = request.round;
    if (r === 1) {
      for (;;) {
        // spin
      }
    }
    if (r === 2) {
      const hoard: Uint8Array[] = [];
      for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
    }
    if (r === 3) throw new Error(`policy gave up on round ${r}`);
    const detail = r === 4 ? look() : '';
    return { assignments: [], unplaced: request.tasks.map((_, task) => ({ task, reason: 'deferred' as const, detail })) };
  },
});
