// Generates the TypeScript types of the plugin worlds (the GPU ones too) from `wit/` with
// jco (guest types), into `generated/` (not committed: it is made from the
// WIT on every install, so it cannot drift from it).
//
//   node tools/gen-types.mjs [WIT_DIR]      (default: ../../wit)
//
// jco 1.35's `jco types` command gives its WIT reader no directory to read
// from (it fails with "failed to read path for WIT"); calling its library
// after granting the reader the filesystem works.
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const wit = resolve(process.argv[2] ?? join(here, '..', '..', '..', 'wit'));
const out = join(here, '..', 'generated');

// The preview2 shim that jco-transpile's WIT reader is linked against.
const require = createRequire(join(here, '..', 'node_modules', '@bytecodealliance', 'jco-transpile', 'package.json'));
const filesystem = await import(pathToFileURL(require.resolve('@bytecodealliance/preview2-shim/filesystem')).href);
filesystem._setPreopens({ '/': '/' });
const { generateGuestTypes, writeFiles } = await import('@bytecodealliance/jco-transpile');

for (const world of ['placement', 'preemption', 'lifecycle-batched', 'placement-gpu', 'preemption-gpu']) {
  const files = await generateGuestTypes(wit, { worldName: world, outDir: out });
  await writeFiles(files);
}
console.log(`gen-types: ${out} (from ${wit})`);
