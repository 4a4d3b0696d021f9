import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase, PGLITE_SETTINGS } from '../src/platform/db';

describe('the embedded database', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('runs with PGLITE_SETTINGS, on a fresh and on an existing data dir', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'berth-db-settings-'));
    dirs.push(dataDir);
    for (let start = 0; start < 2; start++) {
      const db = await openDatabase({ dataDir });
      try {
        for (const [name, value] of Object.entries(PGLITE_SETTINGS)) {
          const { rows } = await db.pool.query(`SHOW ${name}`);
          expect(rows[0][name]).toBe(value);
        }
      } finally {
        await db.close();
      }
    }
  });
});
