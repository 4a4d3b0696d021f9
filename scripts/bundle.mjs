// What the bundle scripts (build-server.mjs, build-cli.mjs) share: how Berth bundles for Node, and
// when a bundle's sources last changed — the newest modification time among files and folders (a
// folder's time changes when a file in it is added, removed or renamed); a bundle is built again
// when that is newer than the bundle. Synchronous: `berth` asks before every command, and ~200
// stat calls take a few milliseconds. vitest's global setup asks it about the console's sources.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

// The Node that Berth runs on, package.json's "engines" (">=20.19"), checked here because `npm start`
// (build-server.mjs) and `berth` (bin/berth.js, through build-cli.mjs) both load this first: an
// older Node gets one line instead of whatever breaks first.
const least = /^>=\s*(\d+)\.(\d+)/.exec(JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).engines?.node ?? '');
const [major, minor] = process.versions.node.split('.').map(Number);
if (least && (major < +least[1] || (major === +least[1] && minor < +least[2]))) {
  process.stderr.write(`Berth needs Node.js ${least[1]}.${least[2]} or later; this is Node.js ${process.versions.node}.\n`);
  process.exit(1);
}

/** esbuild options of both bundles: ES modules for Node 20, packages left in node_modules, dynamic imports as chunks. */
export const NODE_BUNDLE = { bundle: true, splitting: true, format: 'esm', platform: 'node', target: 'node20', packages: 'external' };

/** The newest mtime (ms) of `paths` (relative to `root`), folders walked whole but those named in `skip`; 0 for missing ones. */
export function newestMtime(root, paths, skip = []) {
  let newest = 0;
  const visit = (path) => {
    const stats = statSync(path, { throwIfNoEntry: false });
    if (!stats) return;
    newest = Math.max(newest, stats.mtimeMs);
    if (!stats.isDirectory()) return;
    for (const entry of readdirSync(path, { withFileTypes: true })) {
      const child = join(path, entry.name);
      if (entry.isDirectory()) {
        if (!skip.includes(entry.name)) visit(child);
      } else newest = Math.max(newest, statSync(child, { throwIfNoEntry: false })?.mtimeMs ?? 0);
    }
  };
  for (const path of paths) visit(join(root, path));
  return newest;
}
