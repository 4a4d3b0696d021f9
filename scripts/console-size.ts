// The console's first-page weight: the JavaScript (and CSS) that console/dist/index.html loads,
// gzipped as Berth serves it. `npm run console:size`; test/console-serving.test.ts holds the budget.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { CONSOLE_DIR } from '../src/edges/console';

export interface FirstPage {
  /** Files index.html loads, with their plain and gzipped sizes in bytes. */
  files: { path: string; kind: 'script' | 'style'; bytes: number; gzip: number }[];
  scriptGzip: number;
  styleGzip: number;
}

export async function firstPage(dir: string = CONSOLE_DIR): Promise<FirstPage> {
  const html = await readFile(join(dir, 'index.html'), 'utf8');
  const refs: { path: string; kind: 'script' | 'style' }[] = [];
  for (const tag of html.match(/<(?:script|link)\b[^>]*>/g) ?? []) {
    const src = /\b(?:src|href)="([^"]+)"/.exec(tag)?.[1];
    if (!src?.startsWith('/assets/')) continue;
    if (tag.startsWith('<script') || /rel="modulepreload"/.test(tag)) refs.push({ path: src, kind: 'script' });
    else if (/rel="stylesheet"/.test(tag)) refs.push({ path: src, kind: 'style' });
  }
  const files = await Promise.all(
    refs.map(async (ref) => {
      const body = await readFile(join(dir, ref.path));
      return { ...ref, bytes: body.length, gzip: gzipSync(body, { level: 9 }).length };
    }),
  );
  const total = (kind: string) => files.filter((f) => f.kind === kind).reduce((sum, f) => sum + f.gzip, 0);
  return { files, scriptGzip: total('script'), styleGzip: total('style') };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const page = await firstPage();
  for (const f of page.files) console.log(`${f.path}  ${(f.bytes / 1024).toFixed(1)} KiB, gzipped ${(f.gzip / 1024).toFixed(1)} KiB`);
  console.log(
    `first page: JavaScript ${(page.scriptGzip / 1024).toFixed(1)} KiB gzipped (budget 250 KB), CSS ${(page.styleGzip / 1024).toFixed(1)} KiB`,
  );
}
