// vitest global setup: one embedded database with every migration applied, made once per run.
// Each suite's server starts on a copy of it (seedDatabase) instead of creating a PGlite cluster
// and applying every migration again: 2-3 s a start on these machines, against about 0.6 s for the
// copy. Suites read its place with inject('pgliteTemplate').
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { openDatabase } from '../../src/platform/db/index';

declare module 'vitest' {
  export interface ProvidedContext {
    pgliteTemplate: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-pglite-template-'));
  const db = await openDatabase({ dataDir: dir });
  await db.close();
  // The copy holds the cluster (`pg`) only: the socket PGlite served it on is a process's own.
  project.provide('pgliteTemplate', join(dir, 'pg'));
  return () => rm(dir, { recursive: true, force: true });
}
