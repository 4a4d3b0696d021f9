// Bundles the `berth` command (src/cli/index.ts) into dist/cli/berth.js, which bin/berth.js runs:
// loading tsx and compiling the sources on every call cost half a second to two (docs/cli.md,
// "Start-up"). Built at `npm install` (scripts/generate.mjs) and by vitest's global setup, and
// again by bin/berth.js itself whenever a file under src/ (or this script, package.json,
// tsconfig.json) is newer than the bundle, so a checkout whose src/ was just edited runs the edit.
//
// Packages stay external (node_modules); each command's heavy part (the agents, the database,
// dockerode) is a dynamic import, so a chunk of its own loaded only when that command runs.
// Several `berth` processes may find the bundle stale at once: each writes every file to a
// temporary name and renames it into place, chunks (whose names carry content hashes) first and
// the entry last, so a command that starts meanwhile loads one whole build, old or new.
import { mkdirSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NODE_BUNDLE, newestMtime } from './bundle.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const OUT = join(root, 'dist', 'cli');
export const CLI_ENTRY = join(OUT, 'berth.js');
const SOURCES = ['src', 'package.json', 'tsconfig.json', 'scripts/build-cli.mjs', 'scripts/bundle.mjs'];
/** Chunks of an earlier build are removed after this long (a command started before still loads its own). */
const KEEP_MS = 10 * 60_000;

/** The path of dist/cli/berth.js, built first when it is missing or older than its sources. */
export async function cliBundle() {
  const sources = newestMtime(root, SOURCES);
  const built = statSync(CLI_ENTRY, { throwIfNoEntry: false })?.mtimeMs;
  // The entry carries its sources' newest mtime (set below), give or take the float rounding of utimes.
  if (built === undefined || sources > built + 1) await build(sources);
  return CLI_ENTRY;
}

async function build(sources) {
  const { build } = await import('esbuild');
  const { outputFiles } = await build({
    ...NODE_BUNDLE,
    absWorkingDir: root,
    entryPoints: { berth: 'src/cli/index.ts' },
    outdir: OUT,
    write: false,
    logLevel: 'silent',
  });
  mkdirSync(OUT, { recursive: true });
  const entry = outputFiles.find((f) => f.path === CLI_ENTRY);
  for (const file of outputFiles) if (file !== entry) put(file.path, file.contents);
  put(CLI_ENTRY, entry.contents);
  // Not the time of writing but that of the newest source read: a file saved while this build ran
  // is newer, so the next command builds again.
  utimesSync(CLI_ENTRY, new Date(), sources / 1000);
  prune(new Set(outputFiles.map((f) => basename(f.path))));
}

function put(path, contents) {
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, contents);
  renameSync(temporary, path);
}

function prune(current) {
  const before = Date.now() - KEEP_MS;
  for (const name of readdirSync(OUT)) {
    if (current.has(name)) continue;
    const path = join(OUT, name);
    if ((statSync(path, { throwIfNoEntry: false })?.mtimeMs ?? Number.POSITIVE_INFINITY) < before) rmSync(path, { force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await cliBundle();
