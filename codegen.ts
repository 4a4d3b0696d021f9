import type { CodegenConfig } from '@graphql-codegen/cli';

// Typed documents from the checked-in schema.graphql: one set for the REST route table, one for
// the tests, one for the web console. All are generated at install (scripts/generate.mjs) and
// ignored by git.
const presetConfig = { fragmentMasking: false };
const pluginConfig = { useTypeImports: true, scalars: { DateTime: 'string', JSONObject: 'Record<string, unknown>', SafeInt: 'number' } };

const config: CodegenConfig = {
  schema: 'schema.graphql',
  ignoreNoDocuments: true,
  generates: {
    'src/generated/gql/': {
      documents: ['src/edges/rest/**/*.ts'],
      preset: 'client',
      presetConfig,
      config: pluginConfig,
    },
    'test/gql/': {
      documents: ['test/**/*.ts', '!test/gql/**'],
      preset: 'client',
      presetConfig,
      config: pluginConfig,
    },
    'console/src/generated/gql/': {
      documents: ['console/src/**/*.{ts,tsx}', '!console/src/generated/**'],
      preset: 'client',
      presetConfig,
      config: pluginConfig,
    },
  },
};

export default config;
