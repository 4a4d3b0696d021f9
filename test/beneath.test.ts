// The node's share code against links an environment plants (src/dataplane/beneath.ts): what the
// scan listed a moment ago may be a link by the time it is read or written.
import { chown, lstat, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { duplexPair, receiveFolder, sendFolder } from '../src/dataplane/folder-sync';
import { archiveStream, extractArchive } from '../src/protocol/snapshot-archive';

let dir: string;
let share: string;
let outside: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-beneath-'));
  share = join(dir, 'share');
  outside = join(dir, 'outside');
  await mkdir(share);
  await mkdir(outside);
  await writeFile(join(outside, 'secret'), 'the node host secret');
});
afterEach(() => rm(dir, { recursive: true, force: true }));

async function* listed(...files: { path: string; size: number }[]) {
  for (const f of files) yield { ...f, mode: 0o644, mtimeMs: 0 };
}

it('leaves a file swapped for a link, or behind a folder swapped for one, out of the archive: never the target', async () => {
  await writeFile(join(share, 'kept'), 'kept');
  await symlink(join(outside, 'secret'), join(share, 'key'));
  await symlink(outside, join(share, 'folder'));
  const archive = archiveStream(share, listed({ path: 'folder/secret', size: 20 }, { path: 'kept', size: 4 }, { path: 'key', size: 20 }));
  const copy = join(dir, 'copy');
  expect(await extractArchive(archive, copy)).toEqual({ files: 1, bytes: 4 });
  expect(await readdir(copy)).toEqual(['kept']);
});

it('writes through neither a planted file link nor a planted folder link: real files replace them', async () => {
  const source = join(dir, 'source');
  await mkdir(join(source, 'folder'), { recursive: true });
  await writeFile(join(source, 'key'), 'restored');
  await writeFile(join(source, 'folder', 'secret'), 'restored');
  const archive = archiveStream(source, listed({ path: 'folder/secret', size: 8 }, { path: 'key', size: 8 }));
  await symlink(join(outside, 'secret'), join(share, 'key'));
  await symlink(outside, join(share, 'folder'));
  await extractArchive(archive, share);
  expect(await readFile(join(outside, 'secret'), 'utf8')).toBe('the node host secret');
  expect(await readdir(outside)).toEqual(['secret']);
  for (const path of ['key', 'folder/secret']) expect(await readFile(join(share, path), 'utf8')).toBe('restored');
  expect((await lstat(join(share, 'folder'))).isDirectory()).toBe(true);
});

it.skipIf(process.getuid?.() !== 0)("gives what the sync writes to the share's owner (an image's user), folders included", async () => {
  const source = join(dir, 'source');
  await mkdir(join(source, 'deep', 'er'), { recursive: true });
  await writeFile(join(source, 'deep', 'er', 'file.txt'), 'synced');
  await chown(share, 1234, 1234);
  const [near, far] = duplexPair();
  const received = receiveFolder(far, { root: share });
  await sendFolder(near, { root: source, rules: { include: [], noIgnore: true }, watch: false, final: true });
  await received;
  for (const path of ['deep', 'deep/er', 'deep/er/file.txt']) {
    const st = await lstat(join(share, path));
    expect([st.uid, st.gid], path).toEqual([1234, 1234]);
  }
  expect(await readFile(join(share, 'deep', 'er', 'file.txt'), 'utf8')).toBe('synced');
});
