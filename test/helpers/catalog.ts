// A templates catalog for a suite or a benchmark of its own (no vitest: benchmarks import it too).
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Writes a catalog with the default pool and `templates` (each gets the pool and time-outs). */
export async function writeCatalog(dir: string, templates: Record<string, unknown>[], hotNodes = 32): Promise<string> {
  const file = join(dir, 'container-templates.json');
  const catalog = {
    pools: [{ name: 'default', hotNodes, maxQueued: 100 }],
    templates: templates.map((t) => ({ pool: 'default', idle: '30m', hard: '2h', ...t })),
  };
  await writeFile(file, JSON.stringify(catalog, null, 2));
  return file;
}
