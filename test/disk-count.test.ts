// The node's disk count (src/node/disk-count.ts): bounded per sample, carried across samples, so
// many empty files ahead of a big one never hide it; a finished count forgets what was deleted.
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DiskCount, FOLDER_BYTES } from '../src/node/disk-count';

describe('the disk count', () => {
  let root: string;
  const BIG = 200_000;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'berth-disk-count-'));
    await mkdir(join(root, 'many', 'deep'), { recursive: true });
    for (let i = 0; i < 120; i++) await writeFile(join(root, 'many', `f${i}`), '');
    await writeFile(join(root, 'many', 'deep', 'big'), Buffer.alloc(BIG));
    // A link counts as nothing, and is not followed.
    await symlink('/usr', join(root, 'link'));
  });
  afterAll(() => rm(root, { recursive: true, force: true }));

  const total = BIG + 2 * FOLDER_BYTES;

  it('counts everything in one step when the budget allows', async () => {
    expect(await new DiskCount(root).step(1000)).toBe(total);
  });

  it('goes on where it stopped, so the big file behind the empty ones is counted', async () => {
    const count = new DiskCount(root);
    const seen: number[] = [];
    // 125 entries and 3 folders at 10 a step: done within 13 steps.
    for (let i = 0; i < 14; i++) seen.push(await count.step(10));
    expect(seen.slice(0, 5).every((n) => n < total)).toBe(true);
    expect(seen.at(-1)).toBe(total);
    // Answers never go down during a pass: the last complete count holds until the next completes.
    for (let i = 0; i < 5; i++) expect(await count.step(10)).toBe(total);
  });

  it('forgets a deleted file once a count completes without it', async () => {
    const count = new DiskCount(root);
    expect(await count.step(1000)).toBe(total);
    await rm(join(root, 'many', 'deep', 'big'));
    expect(await count.step(1000)).toBe(2 * FOLDER_BYTES);
    await writeFile(join(root, 'many', 'deep', 'big'), Buffer.alloc(BIG));
  });

  it('counts a folder that vanished as empty, and starts over once closed', async () => {
    expect(await new DiskCount(join(root, 'no-such-folder')).step(10)).toBe(0);
    const count = new DiskCount(root);
    expect(await count.step(3)).toBeLessThan(total);
    count.close();
    // A new pass, not the rest of the closed one taken for a whole count.
    expect(await count.step(3)).toBeLessThan(total);
    expect(await count.step(1000)).toBe(total);
  });
});
