// The Rust policy's scenario table, run natively on the TypeScript port.
import { join } from 'node:path';
import { test } from 'node:test';
import { loadDir, runPreemption } from '@paceline/plugin-sdk/harness';
import { priorityPreempt } from '../src/priority-preempt.ts';

const repo = process.env.PACELINE_REPO ?? process.cwd();

for (const s of loadDir(join(repo, 'plugins', 'priority-preempt', 'scenarios'))) {
  test(`priority-preempt-ts: ${s.name}`, () => {
    runPreemption(priorityPreempt, s);
  });
}
