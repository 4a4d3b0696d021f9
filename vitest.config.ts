import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

const require = createRequire(import.meta.url);

export default defineConfig({
  resolve: {
    // graphql 16 ships CJS (main) and ESM (module); Node loads the CJS one for dependencies, so the
    // test transform must too, or two copies meet ("from another module or realm").
    alias: [{ find: /^graphql$/, replacement: require.resolve('graphql') }],
  },
  test: {
    include: ['test/**/*.test.ts'],
    // Builds the console again when its sources are newer than console/dist; starts a container
    // engine; migrates one embedded database that each server starts on a copy of.
    globalSetup: ['test/helpers/console-build.ts', 'test/helpers/engine-setup.ts', 'test/helpers/database-setup.ts'],
    // `npx vitest run --tags-filter=containers` runs the suites that need the container engine.
    tags: [{ name: 'containers', description: 'runs environments as containers on the engine (Podman)' }],
    // The berth commands the tests run read no login of the person running them (`berth login`).
    env: { XDG_CONFIG_HOME: join(tmpdir(), 'berth-tests-config') },
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // expect.poll's own default (1 s) is shorter than a shell starting in a container under load:
    // the same bound as the browser suites' Playwright waits.
    expect: { poll: { timeout: 15_000 } },
    // Two cores: each suite starts its own server and database; two at a time keeps them responsive.
    maxWorkers: 2,
    pool: 'forks',
    // Files run one after another in each worker, on one module cache: loading the server's modules
    // anew for every file cost about 4 s a file (a third of the run). Each suite still starts its
    // own server with its own data; a file that mocks a module loads what uses it again
    // (test/sync-rules.test.ts).
    isolate: false,
  },
});
