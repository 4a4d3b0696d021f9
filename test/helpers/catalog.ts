// A templates catalog for a suite or a benchmark of its own (no vitest: benchmarks import it too).
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

type Pool = { name: string; hotNodes: number; maxQueued: number };

/**
 * Writes a catalog with the default pool (32 hot nodes), any `pools` besides, and `templates` (each
 * gets the default pool and time-outs unless it names its own).
 */
export async function writeCatalog(dir: string, templates: Record<string, unknown>[], pools: Pool[] = []): Promise<string> {
  const file = join(dir, 'container-templates.json');
  const catalog = {
    pools: [{ name: 'default', hotNodes: 32, maxQueued: 100 }, ...pools],
    templates: templates.map((t) => ({ pool: 'default', idle: '30m', hard: '2h', ...t })),
  };
  await writeFile(file, JSON.stringify(catalog, null, 2));
  return file;
}
