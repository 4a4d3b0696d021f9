// Builds berth-envd (src/node/envd/berth-envd.c), the static helper a node mounts into every
// environment container, into dist/envd/. Runs at `npm install` and `npm start`; rebuilds only when
// the source is newer. Without a C compiler it says so and leaves environments files-only.
import { spawnSync } from 'node:child_process';
import { mkdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'src', 'node', 'envd', 'berth-envd.c');
const target = join(root, 'dist', 'envd', 'berth-envd');

const mtime = (file) => {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return 0;
  }
};

if (mtime(target) < mtime(source)) {
  mkdirSync(dirname(target), { recursive: true });
  const cc = process.env.CC || 'gcc';
  const result = spawnSync(cc, ['-static', '-O2', '-Wall', '-o', target, source, '-lpthread'], { stdio: ['ignore', 'ignore', 'pipe'] });
  if (result.error || result.status !== 0) {
    const why = result.error ? `${cc} is missing` : result.stderr.toString().trim();
    console.warn(`berth: cannot build berth-envd (${why}); environments with an image need it: apt-get install gcc, then npm start`);
  }
}
