// The Rust policy's scenario table, run natively on the TypeScript port.
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { hasGpuSide } from '@paceline/plugin-sdk';
import { loadDir, runPreemption } from '@paceline/plugin-sdk/harness';
import { priorityPreempt } from '../src/priority-preempt.ts';

const repo = process.env.PACELINE_REPO ?? process.cwd();

for (const s of loadDir(join(repo, 'plugins', 'priority-preempt', 'scenarios'))) {
  test(`priority-preempt-ts: ${s.name}`, () => {
    runPreemption(priorityPreempt, s);
  });
}

// The GPU side (WIT 0.1.3): judged in milli-GPUs, as the Rust policy is.
for (const s of loadDir(join(repo, 'plugins', 'priority-preempt', 'scenarios-gpu'))) {
  test(`priority-preempt-ts (milli-GPUs): ${s.name}`, () => {
    assert.ok(s.world === 'preemption' && hasGpuSide(s.input));
    runPreemption(priorityPreempt, s);
  });
}
