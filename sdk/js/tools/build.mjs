// Builds a TypeScript or JavaScript policy into a component: esbuild bundles
// the entry module (with the SDK) into one ES module, then componentize-js
// embeds it in its JavaScript engine against a world of `wit/`.
//
//   node tools/build.mjs --entry src/app.ts --world placement --out policy.wasm [--wit DIR]
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { componentize } from '@bytecodealliance/componentize-js';
import { bundle } from './bundle.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({
  options: {
    entry: { type: 'string' },
    world: { type: 'string' },
    out: { type: 'string' },
    wit: { type: 'string', default: join(here, '..', '..', '..', 'wit') },
  },
});
const worlds = ['placement', 'preemption', 'lifecycle-batched', 'placement-gpu', 'preemption-gpu'];
if (!values.entry || !values.out || !worlds.includes(values.world ?? '')) {
  console.error(`usage: node tools/build.mjs --entry FILE --world ${worlds.join('|')} --out FILE.wasm [--wit DIR]`);
  process.exit(2);
}
const tmp = mkdtempSync(join(tmpdir(), 'paceline-js-build-'));
try {
  const js = join(tmp, 'policy.mjs');
  await bundle(resolve(values.entry), js, 'neutral');
  const started = Date.now();
  const { component } = await componentize({
    sourcePath: js,
    witPath: resolve(values.wit),
    worldName: values.world,
    // No HTTP. Clocks, randomness and stderr stay: the host freezes the
    // clocks, fixes the random bytes and keeps stderr for error messages.
    disableFeatures: ['http', 'fetch-event'],
  });
  writeFileSync(resolve(values.out), component);
  console.log(`built ${values.out}: ${component.length} bytes (componentize ${((Date.now() - started) / 1000).toFixed(1)} s)`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
