// Bundles the `berth` command (src/cli/index.ts) into one file, dist/install/berth.mjs, that needs only
// Node ≥ 20: every package inlined, no node_modules beside it. The server serves it at
// /cli/berth.mjs and its /install.sh installs it as `berth` on a laptop (docs/cli.md, "Install").
// Built with the server's bundle (scripts/build-server.mjs: `npm install`, `npm start`, vitest's
// global setup) when any source is newer; bin/berth.js keeps running dist/cli/berth.js in a checkout.
//
// What cannot travel in one file stays out: the operator commands open the database (Prisma,
// PGlite's WASM) and `berth node` drives the container engine (dockerode's native add-ons) and
// envd, a binary built in the checkout. Those commands load them by dynamic import when they run;
// here each such import becomes a module that fails with one line, so `berth --version` and the
// user's commands never load them and the two say to run from a server checkout.
import { mkdirSync, renameSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { newestMtime } from './bundle.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
// A folder of its own: scripts/build-cli.mjs removes from dist/cli what its own build did not write.
const STANDALONE_CLI = join(root, 'dist', 'install', 'berth.mjs');
const SOURCES = ['src', 'package.json', 'tsconfig.json', 'scripts/build-cli-standalone.mjs', 'scripts/bundle.mjs'];

/** What the file's dynamic imports may not reach: the server's code, the database and the node runtime. */
const CHECKOUT_ONLY = ['src/app/', 'src/platform/', 'src/node/', 'src/observability/', 'src/agent/node-agent.ts'];

/**
 * The file's first lines. The second is where the installer writes the server's URL, the CLI's
 * default (src/cli/default-url.ts); install.sh checks it is there. Packages in CommonJS call
 * `require`, which an ES module has not.
 */
const BANNER = [
  '#!/usr/bin/env node',
  'var BERTH_INSTALLED_URL;',
  "import { createRequire as berthCreateRequire } from 'node:module';",
  'const require = berthCreateRequire(import.meta.url);',
].join('\n');

const MESSAGE =
  'this command runs only from a Berth server checkout (npm run berth -- … there): the single-file berth has no database or node runtime';

/** Dynamic imports of CHECKOUT_ONLY modules resolve to a module that throws MESSAGE when loaded. */
const checkoutOnly = {
  name: 'checkout-only',
  setup(build) {
    build.onResolve({ filter: /^\.\.?\// }, async (args) => {
      if (args.kind !== 'dynamic-import' || args.pluginData === 'checkout-only') return undefined;
      const found = await build.resolve(args.path, {
        kind: args.kind,
        resolveDir: args.resolveDir,
        importer: args.importer,
        pluginData: 'checkout-only',
      });
      const path = relative(root, found.path).split(sep).join('/');
      return CHECKOUT_ONLY.some((prefix) => path.startsWith(prefix)) ? { path, namespace: 'checkout-only' } : found;
    });
    build.onLoad({ filter: /.*/, namespace: 'checkout-only' }, () => ({
      contents: `throw new Error(${JSON.stringify(MESSAGE)});`,
      loader: 'js',
    }));
  },
};

/** The path of dist/install/berth.mjs, built first when it is missing or older than its sources. */
export async function standaloneCli() {
  const sources = newestMtime(root, SOURCES);
  const built = statSync(STANDALONE_CLI, { throwIfNoEntry: false })?.mtimeMs;
  if (built !== undefined && sources <= built + 1) return STANDALONE_CLI;
  const { build } = await import('esbuild');
  const { outputFiles } = await build({
    absWorkingDir: root,
    entryPoints: ['src/cli/index.ts'],
    outfile: STANDALONE_CLI,
    bundle: true,
    splitting: false,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    banner: { js: BANNER },
    plugins: [checkoutOnly],
    write: false,
    logLevel: 'warning',
  });
  mkdirSync(dirname(STANDALONE_CLI), { recursive: true });
  // Renamed into place: the server may be sending the previous build meanwhile.
  const temporary = `${STANDALONE_CLI}.${process.pid}.tmp`;
  writeFileSync(temporary, outputFiles[0].contents);
  renameSync(temporary, STANDALONE_CLI);
  utimesSync(STANDALONE_CLI, new Date(), sources / 1000);
  return STANDALONE_CLI;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await standaloneCli();
