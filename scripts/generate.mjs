// Generates the Prisma client, Pothos' Prisma types and the typed GraphQL documents, then builds
// the web console into console/dist (served at `/`). Runs at `npm install`. Prisma's CLI insists on a schema-engine binary it cannot download
// here; `generate` never runs it, so any existing file satisfies the check (see DESIGN.md).
import { spawnSync } from 'node:child_process';

const env = { ...process.env, PRISMA_HIDE_UPDATE_MESSAGE: '1' };
env.PRISMA_SCHEMA_ENGINE_BINARY ??= process.execPath;

function run(cmd, args, extraEnv = {}) {
  const result = spawnSync(cmd, args, { stdio: 'inherit', env: { ...env, ...extraEnv } });
  if (result.status !== 0) process.exit(result.status ?? 1);
}

run('npx', ['--no-install', 'prisma', 'generate']);
run('npx', ['--no-install', 'graphql-codegen', '--config', 'codegen.ts', '--silent']);
// A NODE_ENV other than production (a shell's, a test runner's) would build React's development bundle.
run('npx', ['--no-install', 'vite', 'build', '--config', 'console/vite.config.ts', '--logLevel', 'warn'], { NODE_ENV: 'production' });
// The bundle `npm start` runs (scripts/build-server.mjs), so that the first start need not build it.
run(process.execPath, ['scripts/build-server.mjs']);
// The bundle `berth` runs (scripts/build-cli.mjs), so that the first command need not build it.
run(process.execPath, ['scripts/build-cli.mjs']);
run(process.execPath, ['scripts/build-envd.mjs']);
