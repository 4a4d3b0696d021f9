// Prints the Pothos schema to schema.graphql (or, with --check, fails when the file differs).
import { readFile, writeFile } from 'node:fs/promises';
import { lexicographicSortSchema, printSchema } from 'graphql';
import { schema } from '../src/edges/schema';

const file = new URL('../schema.graphql', import.meta.url);
const printed = `${printSchema(lexicographicSortSchema(schema))}\n`;
if (process.argv.includes('--check')) {
  const current = await readFile(file, 'utf8').catch(() => '');
  if (current !== printed) {
    console.error('schema.graphql is out of date: run `npm run schema:print`');
    process.exit(1);
  }
} else {
  await writeFile(file, printed);
  console.log('wrote schema.graphql');
}
