#!/usr/bin/env node
// The `berth` command: runs the bundle of src/cli (dist/cli/berth.js), built at `npm install` and
// built again here first when src/ changed since (scripts/build-cli.mjs), so an edit to src/ is
// what the next `npx berth` runs. An error in the sources is reported as esbuild found it; when the
// bundle cannot be written (a read-only install), the sources run through tsx instead.
import { pathToFileURL } from 'node:url';
import { cliBundle } from '../scripts/build-cli.mjs';

let entry;
try {
  entry = await cliBundle();
} catch (error) {
  const problems = error?.errors ?? [];
  if (problems.length) {
    for (const { text, location: at } of problems)
      process.stderr.write(`berth: ${at ? `${at.file}:${at.line}:${at.column}: ` : ''}${text}\n`);
    process.exit(1);
  }
  process.stderr.write(`berth: cannot write dist/cli (${error?.message ?? error}); running src/ through tsx\n`);
}
if (entry) {
  await import(pathToFileURL(entry).href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../src/cli/index.ts');
}
