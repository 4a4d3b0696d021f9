// Where the package's own files are (templates.json, prisma/, console/dist/). Found from this
// module's place, so that it holds both when src/ runs through tsx and when `npm start` runs the
// bundle in dist/server/ (scripts/build-server.mjs).
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

function packageRoot(): string {
  const here = fileURLToPath(import.meta.url);
  for (let dir = dirname(here); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json above ${here}`);
  }
}

export const PACKAGE_ROOT = packageRoot();

/** A path inside the package, e.g. packagePath('prisma', 'migrations'). */
export function packagePath(...parts: string[]): string {
  return join(PACKAGE_ROOT, ...parts);
}
