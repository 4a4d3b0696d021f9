// Bundles the server (src/app/main.ts) into dist/server/ for `npm start`, when any of its sources is
// newer than the bundle. Running the bundle instead of src/ through tsx's loader saves the loader's
// thread and its source maps: about 50 MiB of an idle server's memory and a second of its start
// (docs/benchmarks.md, goal 5). Packages stay external (node_modules), and modules that are loaded
// on demand (the Azure store) stay separate chunks, loaded only when needed. The single-file CLI the
// server serves at /cli/berth.mjs is built here too (scripts/build-cli-standalone.mjs), when stale.
import { rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { standaloneCli } from './build-cli-standalone.mjs';
import { NODE_BUNDLE, newestMtime } from './bundle.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const SERVER_ENTRY = join(root, 'dist', 'server', 'main.js');

const built = await stat(SERVER_ENTRY).then(
  (s) => s.mtimeMs,
  () => 0,
);
if (built <= newestMtime(root, ['src', 'package.json', 'tsconfig.json', 'scripts/build-server.mjs', 'scripts/bundle.mjs'])) {
  // Chunk names carry content hashes: a clean folder holds no chunk of an earlier build.
  await rm(join(root, 'dist', 'server'), { recursive: true, force: true });
  // Loaded only to build: the usual start finds the bundle fresh and goes on at once.
  const { build } = await import('esbuild');
  await build({
    ...NODE_BUNDLE,
    absWorkingDir: root,
    // The sealing threads' code is an entry of its own: src/platform/crypto/chunk-sealer.ts starts it from
    // dist/server/seal-worker.js.
    entryPoints: { main: 'src/app/main.ts', 'seal-worker': 'src/platform/crypto/seal-worker.ts' },
    outdir: 'dist/server',
    logLevel: 'warning',
  });
}
await standaloneCli();
