import type { CodegenConfig } from '@graphql-codegen/cli';

// Typed documents from the checked-in schema.graphql: one set for the REST route table, one for
// the tests. Both are generated at install (scripts/generate.mjs) and ignored by git.
const presetConfig = { fragmentMasking: false };

const config: CodegenConfig = {
  schema: 'schema.graphql',
  ignoreNoDocuments: true,
  generates: {
    'src/generated/gql/': {
      documents: ['src/rest/**/*.ts'],
      preset: 'client',
      presetConfig,
      config: { useTypeImports: true, scalars: { DateTime: 'string', JSONObject: 'Record<string, unknown>', SafeInt: 'number' } },
    },
    'test/gql/': {
      documents: ['test/**/*.ts', '!test/gql/**'],
      preset: 'client',
      presetConfig,
      config: { useTypeImports: true, scalars: { DateTime: 'string', JSONObject: 'Record<string, unknown>', SafeInt: 'number' } },
    },
  },
};

export default config;
