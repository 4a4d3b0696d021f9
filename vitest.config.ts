import { createRequire } from 'node:module';
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
    // Builds the console again when its sources are newer than console/dist.
    globalSetup: ['test/helpers/console-build.ts', 'test/helpers/engine-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // expect.poll's own default (1 s) is shorter than a shell starting in a container under load:
    // the same bound as the browser suites' Playwright waits.
    expect: { poll: { timeout: 15_000 } },
    // Two cores: each suite starts its own server and database; two at a time keeps them responsive.
    maxWorkers: 2,
    pool: 'forks',
  },
});
