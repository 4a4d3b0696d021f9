// vitest global setup: the server bundle that `npm start` runs, the bundle the `berth` command runs and
// the built console that the browser suites drive (all built by `npm install`) are built again first
// when their sources changed since, so that no suite tests a stale build.
import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { newestMtime } from '../../scripts/bundle.mjs';

const root = join(import.meta.dirname, '..', '..');
const sources = ['console/src', 'console/public', 'console/index.html', 'console/vite.config.ts', 'schema.graphql'];

export default function setup(): void {
  // The server bundle `npm start` runs (test/start.test.ts runs it too), built again when stale.
  execFileSync(process.execPath, ['scripts/build-server.mjs'], { cwd: root, stdio: 'inherit' });
  // The bundle `berth` runs: bin/berth.js would build it too, but then several suites' first commands at once.
  execFileSync(process.execPath, ['scripts/build-cli.mjs'], { cwd: root, stdio: 'inherit' });
  const built = statSync(join(root, 'console/dist/index.html'), { throwIfNoEntry: false })?.mtimeMs ?? 0;
  // Codegen's output (console/src/generated) is made by the build itself.
  if (newestMtime(root, sources, ['generated']) <= built) return;
  console.log('console sources changed since the last build: building the console (npm run build:console)');
  // vitest sets NODE_ENV=test, which would build React's development bundle.
  execFileSync('npm', ['run', '--silent', 'build:console'], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, NODE_ENV: 'production' },
  });
}
