import { readFile } from 'node:fs/promises';
import { lexicographicSortSchema, printSchema } from 'graphql';
import { expect, it } from 'vitest';
import { schema } from '../src/edges/schema';

it('schema.graphql matches the Pothos schema (run `npm run schema:print` after changing it)', async () => {
  const checkedIn = await readFile(new URL('../schema.graphql', import.meta.url), 'utf8');
  expect(checkedIn).toBe(`${printSchema(lexicographicSortSchema(schema))}\n`);
});
