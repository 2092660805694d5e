// Runs TypeScript tests with Node's test runner: each `*.test.ts` under the
// given directories is bundled by esbuild (Node 20 does not run TypeScript)
// into a temporary directory, then `node --test` runs them all.
//
//   node tools/test.mjs DIR...
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundle } from './bundle.mjs';

const sdk = join(dirname(fileURLToPath(import.meta.url)), '..');
const dirs = process.argv.slice(2);
if (dirs.length === 0) {
  console.error('usage: node tools/test.mjs DIR...');
  process.exit(2);
}
const found = [];
const walk = (d) => {
  for (const n of readdirSync(d)) {
    const p = join(d, n);
    if (n === 'node_modules') continue;
    if (statSync(p).isDirectory()) walk(p);
    else if (n.endsWith('.test.ts')) found.push(p);
  }
};
dirs.forEach((d) => walk(resolve(d)));
if (found.length === 0) {
  console.error(`no *.test.ts files under ${dirs.join(' ')}`);
  process.exit(1);
}
const out = mkdtempSync(join(tmpdir(), 'paceline-js-test-'));
// The bundles import `yaml` at run time: let them find the SDK's copy.
symlinkSync(join(sdk, 'node_modules'), join(out, 'node_modules'));
const files = [];
for (const [i, f] of found.entries()) {
  const o = join(out, `${i}-${basename(f, '.ts')}.mjs`);
  await bundle(f, o, 'node');
  files.push(o);
}
// Tests find their fixtures relative to the source file, not the bundle.
const r = spawnSync(process.execPath, ['--test', ...files], { stdio: 'inherit', env: { ...process.env, PACELINE_REPO: resolve(sdk, '..', '..') } });
rmSync(out, { recursive: true, force: true });
process.exit(r.status ?? 1);
