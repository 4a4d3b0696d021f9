// Builds berth-envd (src/node/envd/berth-envd.c), the static helper a node mounts into every
// environment container, into dist/envd/envd. Runs at `npm install` and `npm start`; rebuilds only
// when the source is newer. Without a C compiler it says so and leaves environments files-only.
//
// dist/envd is mounted whole, read-only, at /.berth in every container (src/node/runtime.ts): it
// holds the program and nothing else, and a new build takes its place in one rename, so no
// container ever runs half a file.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'src', 'node', 'envd', 'berth-envd.c');
const folder = join(root, 'dist', 'envd');
const target = join(folder, 'envd');

const mtime = (file) => {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return 0;
  }
};

if (mtime(target) < mtime(source)) {
  mkdirSync(folder, { recursive: true });
  const building = join(root, 'dist', `envd-${process.pid}.tmp`);
  const cc = process.env.CC || 'gcc';
  const result = spawnSync(cc, ['-static', '-O2', '-Wall', '-o', building, source, '-lpthread'], { stdio: ['ignore', 'ignore', 'pipe'] });
  if (result.error || result.status !== 0) {
    rmSync(building, { force: true });
    const why = result.error ? `${cc} is missing` : result.stderr.toString().trim();
    console.warn(`berth: cannot build berth-envd (${why}); environments with an image need it: apt-get install gcc, then npm start`);
  } else {
    renameSync(building, target);
  }
}
// What an earlier layout left there (dist/envd/berth-envd) would be in every container too.
for (const name of readdirSync(folder).filter((n) => n !== 'envd')) {
  rmSync(join(folder, name), { recursive: true, force: true });
}
