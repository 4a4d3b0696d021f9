// The uploaded tar of a .devcontainer folder (src/modules/templates/context-tar.ts): both layouts,
// the tar rules (paths and links that lead out, devices), the size limit, and the build context tar
// it writes for the engine.
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DomainError, ValidationError } from '../src/kernel/errors';
import { buildContextTar, type ContextUpload, readContextTar } from '../src/modules/templates/context-tar';
import { parseDevcontainer } from '../src/modules/templates/devcontainer';

type Entry = { name: string; type?: tar.Header['type']; body?: string | Buffer; linkname?: string; mode?: number };

async function collect(stream: AsyncIterable<unknown>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const piece of stream) parts.push(piece as Buffer);
  return Buffer.concat(parts);
}

/** A tar made by tar-stream directly, with whatever entries a hostile client might send. */
async function tarOf(entries: Entry[]): Promise<Buffer> {
  const pack = tar.pack();
  for (const e of entries) {
    const type = e.type ?? 'file';
    pack.entry(
      { name: e.name, type, linkname: e.linkname, mode: e.mode, size: type === 'file' ? undefined : 0 },
      type === 'file' ? (e.body ?? '') : '',
    );
  }
  pack.finalize();
  return collect(pack as AsyncIterable<Buffer>);
}

/** The entries of a tar: name, type, content, link. */
async function entriesOf(bytes: Buffer): Promise<{ name: string; type: string; body: string; linkname?: string }[]> {
  const extract = tar.extract();
  const out: { name: string; type: string; body: string; linkname?: string }[] = [];
  const done = (async () => {
    for await (const entry of extract) {
      const body = (await collect(entry)).toString();
      out.push({
        name: entry.header.name,
        type: entry.header.type,
        body,
        ...(entry.header.linkname ? { linkname: entry.header.linkname } : {}),
      });
    }
  })();
  extract.end(bytes);
  await done;
  return out;
}

const DEVCONTAINER = `{
  // built from the Dockerfile next to it, with the repository as the context
  "build": { "dockerfile": "Dockerfile", "context": ".." },
}`;

let tmp: string;
let previousTmp: string | undefined;
const opened: ContextUpload[] = [];

beforeAll(async () => {
  // The uploads' temporary folders go here, to see that none is left behind.
  tmp = await mkdtemp(join(tmpdir(), 'berth-context-test-'));
  previousTmp = process.env.TMPDIR;
  process.env.TMPDIR = tmp;
});
afterEach(async () => {
  for (const upload of opened.splice(0)) await upload.close();
  expect(await readdir(tmp)).toEqual([]);
});
afterAll(async () => {
  if (previousTmp === undefined) delete process.env.TMPDIR;
  else process.env.TMPDIR = previousTmp;
  await rm(tmp, { recursive: true, force: true });
});

async function read(entries: Entry[], opts?: Parameters<typeof readContextTar>[1]): Promise<ContextUpload> {
  const upload = await readContextTar(Readable.from([await tarOf(entries)]), opts);
  opened.push(upload);
  return upload;
}

async function refusal(entries: Entry[] | Buffer, opts?: Parameters<typeof readContextTar>[1]): Promise<DomainError> {
  const bytes = Buffer.isBuffer(entries) ? entries : await tarOf(entries);
  const err = await readContextTar(Readable.from([bytes]), opts).then(
    (upload) => {
      opened.push(upload);
      throw new Error('expected a refusal');
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DomainError);
  return err as DomainError;
}

const repo: Entry[] = [
  { name: '.devcontainer/', type: 'directory' },
  { name: '.devcontainer/devcontainer.json', body: DEVCONTAINER },
  { name: '.devcontainer/Dockerfile', body: 'FROM localhost/berth-test/busybox:1\nCOPY src /src\n' },
  { name: 'src/', type: 'directory' },
  { name: 'src/app.js', body: 'console.log(1)\n', mode: 0o755 },
  { name: 'src/current', type: 'symlink', linkname: 'app.js' },
  { name: 'src/copy.js', type: 'link', linkname: 'src/app.js' },
];

describe('context tar: layouts', () => {
  it('reads a .devcontainer folder with the repository, and writes its build context', async () => {
    const upload = await read(repo);
    expect(upload.folder).toBe('.devcontainer');
    expect(upload.devcontainer).toBe(DEVCONTAINER);
    expect(upload.files.map((f) => [f.path, f.type])).toEqual([
      ['.devcontainer', 'directory'],
      ['.devcontainer/devcontainer.json', 'file'],
      ['.devcontainer/Dockerfile', 'file'],
      ['src', 'directory'],
      ['src/app.js', 'file'],
      ['src/current', 'symlink'],
      ['src/copy.js', 'link'],
    ]);
    expect(upload.has('.devcontainer/Dockerfile')).toBe(true);
    expect(upload.has('src/current')).toBe(true); // through the link
    expect(upload.has('src')).toBe(false);
    expect(upload.has('Dockerfile')).toBe(false);

    const parsed = parseDevcontainer(upload.devcontainer, {
      name: 'app',
      pools: ['default'],
      defaultPool: 'default',
      folder: upload.folder,
      contextFiles: (p) => upload.has(p),
    });
    expect(parsed.build).toEqual({ context: '', dockerfile: '.devcontainer/Dockerfile', args: {} });

    const context = await entriesOf(await collect(upload.contextTar(parsed.build!.context)));
    expect(context).toEqual([
      { name: '.devcontainer', type: 'directory', body: '' },
      { name: '.devcontainer/devcontainer.json', type: 'file', body: DEVCONTAINER },
      { name: '.devcontainer/Dockerfile', type: 'file', body: 'FROM localhost/berth-test/busybox:1\nCOPY src /src\n' },
      { name: 'src', type: 'directory', body: '' },
      { name: 'src/app.js', type: 'file', body: 'console.log(1)\n' },
      { name: 'src/current', type: 'symlink', body: '', linkname: 'app.js' },
      // A hard link is written as a file of its own.
      { name: 'src/copy.js', type: 'file', body: 'console.log(1)\n' },
    ]);
    // Rooted at a folder, paths are relative to it; it can be written again.
    const sub = await entriesOf(await collect(upload.contextTar('src')));
    expect(sub.map((e) => e.name)).toEqual(['app.js', 'current', 'copy.js']);
    expect(await entriesOf(await buildContextTar(upload, 'src'))).toEqual(sub);
  });

  it('reads the folder\'s own files at the root ("./" names too)', async () => {
    const upload = await read([
      { name: './', type: 'directory' },
      { name: './devcontainer.json', body: '{"build": {"dockerfile": "Dockerfile"}}' },
      { name: './Dockerfile', body: 'FROM scratch\n' },
    ]);
    expect(upload.folder).toBe('');
    expect(upload.files.map((f) => f.path)).toEqual(['devcontainer.json', 'Dockerfile']);
    const parsed = parseDevcontainer(upload.devcontainer, { name: 'app', pools: ['p'], defaultPool: 'p', folder: upload.folder });
    expect(parsed.build).toMatchObject({ context: '', dockerfile: 'Dockerfile' });
    expect((await entriesOf(await buildContextTar(upload, ''))).map((e) => e.name)).toEqual(['devcontainer.json', 'Dockerfile']);
  });

  it('reads .devcontainer.json at the root', async () => {
    const upload = await read([{ name: '.devcontainer.json', body: '{"image": "a"}' }]);
    expect([upload.folder, upload.devcontainer]).toEqual(['', '{"image": "a"}']);
  });

  it('prefers .devcontainer/devcontainer.json, and a later entry replaces an earlier one', async () => {
    const upload = await read([
      { name: 'devcontainer.json', body: '{"image": "root"}' },
      { name: '.devcontainer/devcontainer.json', body: '{"image": "first"}' },
      { name: '.devcontainer/devcontainer.json', body: '{"image": "second"}' },
    ]);
    expect([upload.folder, upload.devcontainer]).toEqual(['.devcontainer', '{"image": "second"}']);
    expect(upload.files.map((f) => f.path)).toEqual(['devcontainer.json', '.devcontainer/devcontainer.json']);
  });

  it('refuses an upload without devcontainer.json, or with one that is a link or too long', async () => {
    const none = await refusal([{ name: 'Dockerfile', body: 'FROM scratch' }]);
    expect(none).toMatchObject({ code: 'invalid', field: 'devcontainer.json', message: expect.stringMatching(/not found in the upload/) });
    const link = await refusal([
      { name: 'other.json', body: '{}' },
      { name: 'devcontainer.json', type: 'symlink', linkname: 'other.json' },
    ]);
    expect(link.message).toMatch(/must be a regular file/);
    const long = await refusal([{ name: 'devcontainer.json', body: Buffer.alloc(1024 * 1024 + 1, 32) }]);
    expect(long).toMatchObject({ field: 'devcontainer.json', message: 'devcontainer.json: is larger than 1 MiB' });
  });
});

describe('context tar: refusals', () => {
  const json: Entry = { name: 'devcontainer.json', body: '{"image": "a"}' };
  const cases: [string, Entry[], RegExp][] = [
    ['an absolute path', [json, { name: '/etc/cron.d/x', body: 'x' }], /entry "\/etc\/cron.d\/x" has an absolute path/],
    ['a path climbing out', [json, { name: '../evil', body: 'x' }], /entry "..\/evil" climbs out of the archive/],
    ['a path climbing out in the middle', [json, { name: 'a/../../evil', body: 'x' }], /climbs out/],
    [
      'a symbolic link out',
      [json, { name: 'l', type: 'symlink', linkname: '../../etc/passwd' }],
      /the symbolic link "l" → "..\/..\/etc\/passwd" leads out/,
    ],
    ['an absolute symbolic link', [json, { name: 'l', type: 'symlink', linkname: '/etc/passwd' }], /leads out of the archive/],
    [
      'a symbolic link out through another link',
      [
        json,
        { name: 'a/b/up', type: 'symlink', linkname: '..' },
        // Read as written, a/b/up/../.. is "a"; through the link it is the root's parent.
        { name: 'm', type: 'symlink', linkname: 'a/b/up/../..' },
      ],
      /the symbolic link "m" → "a\/b\/up\/..\/.." leads out/,
    ],
    ['a loop of links', [json, { name: 'x', type: 'symlink', linkname: 'y' }, { name: 'y', type: 'symlink', linkname: 'x' }], /leads out/],
    [
      'an entry under a symbolic link',
      [json, { name: 'd', type: 'symlink', linkname: 'src' }, { name: 'd/x', body: 'x' }],
      /entry "d\/x" lies under "d", which is a symbolic link/,
    ],
    ['an entry under a file', [json, { name: 'f', body: 'x' }, { name: 'f/x', body: 'x' }], /lies under "f", which is a file/],
    ['a hard link out', [json, { name: 'h', type: 'link', linkname: '../etc/passwd' }], /the hard link "h" → "..\/etc\/passwd" leads out/],
    ['an absolute hard link', [json, { name: 'h', type: 'link', linkname: '/etc/passwd' }], /leads out/],
    [
      'a hard link to an entry not seen yet',
      [json, { name: 'h', type: 'link', linkname: 'later' }, { name: 'later', body: 'x' }],
      /names no entry before it/,
    ],
    [
      'a hard link to a folder',
      [json, { name: 'd', type: 'directory' }, { name: 'h', type: 'link', linkname: 'd' }],
      /names a directory, not a file/,
    ],
    ['a character device', [json, { name: 'null', type: 'character-device' }], /entry "null" is a character-device/],
    ['a block device', [json, { name: 'sda', type: 'block-device' }], /is a block-device/],
    ['a FIFO', [json, { name: 'pipe', type: 'fifo' }], /is a fifo/],
    ['a root that is a file', [json, { name: './', type: 'symlink', linkname: 'x' }], /the root of the archive must be a folder/],
  ];
  it.each(cases)('%s', async (_what, entries, message) => {
    const err = await refusal(entries);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).field).toBe('tar');
    expect(err.message).toMatch(/^tar: /);
    expect(err.message).toMatch(message);
  });

  it('takes ".." that stays inside, and links that stay inside', async () => {
    const upload = await read([
      json,
      { name: 'a/../b.txt', body: 'b' },
      { name: 'a/b/up', type: 'symlink', linkname: '..' },
      { name: 'm', type: 'symlink', linkname: 'a/b/up/..' },
      { name: 'h', type: 'link', linkname: './a/../b.txt' },
    ]);
    expect(upload.files.map((f) => [f.path, f.linkname])).toEqual([
      ['devcontainer.json', undefined],
      ['b.txt', undefined],
      ['a/b/up', '..'],
      ['m', 'a/b/up/..'],
      ['h', 'b.txt'],
    ]);
  });

  it('refuses what is no tar, and a truncated one', async () => {
    const garbage = await refusal(Buffer.alloc(2048, 'x'));
    expect(garbage).toMatchObject({ field: 'tar', message: expect.stringMatching(/^tar: not a valid tar archive/) });
    const whole = await tarOf([json, { name: 'big', body: Buffer.alloc(10_000, 1) }]);
    const cut = await refusal(whole.subarray(0, 4096));
    expect(cut).toMatchObject({ field: 'tar', message: 'tar: the archive is truncated' });
  });
});

describe('context tar: limits', () => {
  const json: Entry = { name: 'devcontainer.json', body: '{"image": "a"}' };

  it('refuses an upload over the byte limit with 413, without destroying the request', async () => {
    const bytes = await tarOf([json, { name: 'big', body: Buffer.alloc(64 * 1024, 1) }]);
    // A request that sends the first 32 KiB and then waits: the answer must not wait for the rest.
    const source = new PassThrough();
    source.write(bytes.subarray(0, 32 * 1024));
    const err = await readContextTar(source, { maxBytes: 16 * 1024 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DomainError);
    expect(err).toMatchObject({ code: 'too_large', message: 'the upload is larger than 16384 bytes' });
    expect(source.destroyed).toBe(false);
    source.destroy();
    // Just under the limit is fine.
    const upload = await readContextTar(Readable.from([bytes]), { maxBytes: bytes.length });
    opened.push(upload);
    expect(upload.files.map((f) => f.size)).toEqual([14, 64 * 1024]);
  });

  it('refuses too many entries with 413', async () => {
    const entries: Entry[] = [json, ...Array.from({ length: 10 }, (_, i) => ({ name: `f${i}`, body: 'x' }))];
    const err = await refusal(entries, { maxEntries: 5 });
    expect(err).toMatchObject({ code: 'too_large', message: 'the upload holds more than 5 entries' });
  });

  it('refuses a refused entry without waiting for the rest of the request', async () => {
    const bytes = await tarOf([json, { name: '../evil', body: 'x' }]);
    const source = new PassThrough();
    source.write(bytes.subarray(0, 2048)); // and nothing more yet
    const err = await readContextTar(source).catch((e: unknown) => e);
    expect(err).toMatchObject({ field: 'tar', message: expect.stringMatching(/climbs out/) });
    expect(source.destroyed).toBe(false);
    source.destroy();
  });
});

describe('context tar: the build context', () => {
  it('refuses a context outside the root, one that is no folder, and links leading out of it', async () => {
    const upload = await read([
      { name: 'devcontainer.json', body: '{}' },
      { name: 'app/Dockerfile', body: 'FROM scratch' },
      { name: 'app/shared', type: 'symlink', linkname: '../lib' },
      { name: 'lib/x', body: 'x' },
      { name: 'web/', type: 'directory' },
      { name: 'web/Dockerfile', body: 'FROM scratch' },
    ]);
    for (const context of ['..', '../x', '/etc']) {
      expect(() => upload.contextTar(context)).toThrow(
        expect.objectContaining({ field: 'devcontainer.build.context', message: expect.stringMatching(/leads out of the upload/) }),
      );
    }
    expect(() => upload.checkContext('nope')).toThrow(/"nope" is not a folder of the upload/);
    expect(() => upload.checkContext('lib/x')).toThrow(/"lib\/x" is not a folder of the upload/);
    // app/shared stays inside the upload but leads out of the context "app".
    expect(() => upload.checkContext('app')).toThrow(
      expect.objectContaining({
        field: 'tar',
        message: expect.stringMatching(/"app\/shared" → "..\/lib" leads out of the build context "app"/),
      }),
    );
    upload.checkContext('');
    upload.checkContext('web');
    upload.checkContext('lib'); // a folder with no entry of its own
    expect((await entriesOf(await buildContextTar(upload, 'web/'))).map((e) => e.name)).toEqual(['Dockerfile']);
  });

  it('leaves nothing behind once closed', async () => {
    const upload = await readContextTar(Readable.from([await tarOf(repo)]));
    expect(await readdir(tmp)).toHaveLength(1);
    await upload.close();
    expect(await readdir(tmp)).toEqual([]);
  });
});
