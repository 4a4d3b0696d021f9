import { execFile } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import * as tar from 'tar-stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { selectFiles } from '../src/kernel/sync-rules';
import { ArchiveCounter, archiveStream, extractArchive } from '../src/protocol/snapshot-archive';

const run = promisify(execFile);

async function collect(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const piece of stream) parts.push(piece as Buffer);
  return Buffer.concat(parts);
}

/** A tar made by tar-stream directly, with whatever entries a hostile node might send. */
async function rawTar(entries: { name: string; type?: tar.Header['type']; body?: string; linkname?: string }[]): Promise<Buffer> {
  const pack = tar.pack();
  for (const e of entries) {
    pack.entry(
      { name: e.name, type: e.type ?? 'file', linkname: e.linkname, size: e.type && e.type !== 'file' ? 0 : undefined },
      e.body ?? '',
    );
  }
  pack.finalize();
  return collect(Readable.from(pack as AsyncIterable<Buffer>));
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
    .sort();
}

async function count(bytes: Buffer) {
  const counter = new ArchiveCounter();
  await pipeline(Readable.from([bytes]), counter, async (s) => {
    for await (const _ of s);
  });
  return counter.stats;
}

describe('snapshot archive (tar)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-archive-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('round-trips a folder (modes, nested and long paths) and any tar reads it', async () => {
    const src = join(dir, 'src');
    const long = `${'d'.repeat(120)}/${'f'.repeat(120)}.txt`;
    await mkdir(join(src, 'sub', 'deep'), { recursive: true });
    await mkdir(join(src, 'd'.repeat(120)), { recursive: true });
    await writeFile(join(src, 'a.txt'), 'alpha');
    await writeFile(join(src, 'sub', 'deep', 'run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
    await writeFile(join(src, long), 'long');
    await writeFile(join(src, 'empty'), '');
    const bytes = await collect(archiveStream(src, selectFiles(src, { include: [], noIgnore: false, files: {} })));

    expect(await count(bytes)).toEqual({ files: 4, bytes: 5 + 18 + 4 });
    const tarFile = join(dir, 'a.tar');
    await writeFile(tarFile, bytes);
    const { stdout } = await run('tar', ['-tf', tarFile]);
    expect(stdout.trim().split('\n').sort()).toEqual(['a.txt', 'empty', long, 'sub/deep/run.sh'].sort());

    const out = join(dir, 'out');
    const stats = await extractArchive(Readable.from([bytes]), out);
    expect(stats).toEqual({ files: 4, bytes: 27 });
    expect(await filesUnder(out)).toEqual(['a.txt', long, 'empty', 'sub/deep/run.sh'].sort());
    expect(await readFile(join(out, 'sub/deep/run.sh'), 'utf8')).toBe('#!/bin/sh\necho hi\n');
    expect((await stat(join(out, 'sub/deep/run.sh'))).mode & 0o777).toBe(0o755);
  });

  it('writes nothing outside the share folder: ".." paths, absolute paths and links are refused', async () => {
    const out = join(dir, 'guarded');
    await expect(extractArchive(Readable.from([await rawTar([{ name: '../escape.txt', body: 'x' }])]), out)).rejects.toThrow(/\.\./);
    await expect(extractArchive(Readable.from([await rawTar([{ name: '/etc/escape.txt', body: 'x' }])]), out)).rejects.toThrow(/absolute/);
    await expect(extractArchive(Readable.from([await rawTar([{ name: 'link', type: 'symlink', linkname: '/tmp' }])]), out)).rejects.toThrow(
      /not a regular file/,
    );
    // A folder inside the share that is a link to elsewhere is not followed: a folder replaces it.
    const elsewhere = join(dir, 'elsewhere');
    await mkdir(elsewhere, { recursive: true });
    await symlink(elsewhere, join(out, 'sneaky'));
    await extractArchive(Readable.from([await rawTar([{ name: 'sneaky/x.txt', body: 'x' }])]), out);
    expect((await lstat(join(out, 'sneaky'))).isDirectory()).toBe(true);
    expect(await readFile(join(out, 'sneaky', 'x.txt'), 'utf8')).toBe('x');
    await writeFile(join(dir, 'target.txt'), 'keep');
    await symlink(join(dir, 'target.txt'), join(out, 'file-link'));
    // A file that is a link: the restored file replaces the link, its target is untouched.
    await extractArchive(Readable.from([await rawTar([{ name: 'file-link', body: 'overwritten' }])]), out);
    expect((await lstat(join(out, 'file-link'))).isFile()).toBe(true);
    expect(await readFile(join(out, 'file-link'), 'utf8')).toBe('overwritten');
    expect(await readFile(join(dir, 'target.txt'), 'utf8')).toBe('keep');
    expect(await readdir(elsewhere)).toEqual([]);
    expect(await filesUnder(dir)).not.toContain('escape.txt');
  });

  it('the server-side counter refuses truncated archives, non-tar bytes and entries that are not files', async () => {
    const good = await rawTar([{ name: 'a.txt', body: 'hello world' }]);
    await expect(count(good)).resolves.toEqual({ files: 1, bytes: 11 });
    await expect(count(good.subarray(0, 700))).rejects.toThrow(/truncated/);
    await expect(count(Buffer.alloc(1024, 7))).rejects.toThrow(/snapshot archive/);
    await expect(count(await rawTar([{ name: 'l', type: 'symlink', linkname: 'a' }]))).rejects.toThrow(/not a regular file/);
    await expect(count(await rawTar([{ name: '../x', body: 'x' }]))).rejects.toThrow(/\.\./);
  });
});
