// Shared esbuild settings: TypeScript in, one ES module out, with
// `@paceline/plugin-sdk` (and `/harness`) resolved to this SDK's sources.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const sdk = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Bundles `entry` into `outfile` for `platform` ('neutral' for a component, 'node' for tests). */
export async function bundle(entry, outfile, platform) {
  await esbuild.build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    format: 'esm',
    platform,
    target: 'es2022',
    mainFields: ['module', 'main'],
    external: platform === 'node' ? ['node:*', 'yaml'] : [],
    nodePaths: [join(sdk, 'node_modules')],
    alias: {
      '@paceline/plugin-sdk/harness': join(sdk, 'src', 'harness.ts'),
      '@paceline/plugin-sdk': join(sdk, 'src', 'index.ts'),
    },
    logLevel: 'warning',
  });
}
