// When a bundle's sources last changed: the newest modification time among files and folders
// (a folder's time changes when a file in it is added, removed or renamed). The bundle scripts
// (build-server.mjs, build-cli.mjs) build again when it is newer than their bundle. Synchronous:
// `berth` asks before every command, and ~200 stat calls take about a millisecond.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The newest mtime (ms) of `paths` (relative to `root`), folders walked whole; 0 for missing ones. */
export function newestMtime(root, paths) {
  let newest = 0;
  const visit = (path) => {
    const stats = statSync(path, { throwIfNoEntry: false });
    if (!stats) return;
    newest = Math.max(newest, stats.mtimeMs);
    if (!stats.isDirectory()) return;
    for (const entry of readdirSync(path, { withFileTypes: true })) {
      const child = join(path, entry.name);
      if (entry.isDirectory()) visit(child);
      else newest = Math.max(newest, statSync(child, { throwIfNoEntry: false })?.mtimeMs ?? 0);
    }
  };
  for (const path of paths) visit(join(root, path));
  return newest;
}
