// The tar of a `.devcontainer` folder uploaded to `PUT /v1/templates/{name}` (docs/environments.md,
// "Templates through the API"): devcontainer.json and the build context it names. readContextTar
// checks the archive as it streams in and keeps it; contextTar then writes the tar the engine's
// build API takes, rooted at the build context folder.
//
// Entries under `.devcontainer/` and at the archive's root are both accepted: devcontainer.json is
// looked for at `.devcontainer/devcontainer.json`, `.devcontainer.json` and `devcontainer.json`, in
// that order (the spec's places, and the folder's own files at the root). Refused, 422 with field
// `tar` naming the entry: absolute paths, paths that climb out of the root with `..`, entries that
// lie under a symbolic link or a file, symbolic links that resolve outside the root (through other
// links too), hard links to entries not seen before them or that are no regular file, devices,
// FIFOs. Over MAX_CONTEXT_BYTES bytes of archive (or MAX_CONTEXT_ENTRIES entries): 413 too_large,
// as soon as the stream crosses it. A later entry of the same path replaces an earlier one, as tar
// extracts.
//
// Where the content stays: in a temporary folder under os.tmpdir() (one file per regular entry,
// named by a counter, never by the entry's path, so no entry name reaches the filesystem), removed
// by close(). Kept in memory instead, a 100 MiB upload would hold 100 MiB of the server's heap for
// as long as the builds of the template need it, once per upload in flight; on disk, memory holds
// the entries' headers only, each body passes through in stream-sized pieces when read and when
// written to the context tar, and the context tar is a stream too, never a Buffer.
import { createReadStream } from 'node:fs';
import { mkdtemp, open, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { DomainError, PayloadTooLargeError, ValidationError } from '../../kernel/errors';
import { show } from '../../kernel/show';
import { MIB } from '../../kernel/sizes';
import { MAX_DEVCONTAINER_BYTES } from './devcontainer';

/** The most bytes an uploaded archive may have. */
export const MAX_CONTEXT_BYTES = 100 * MIB;
/** The most entries it may have (each costs a header in memory). */
export const MAX_CONTEXT_ENTRIES = 50_000;
/** The longest path of an entry, in bytes. */
const MAX_PATH_BYTES = 4096;
/** The most symbolic links followed while resolving one path (Linux's limit). */
const MAX_LINK_HOPS = 40;
const FIELD = 'tar';

/** Where devcontainer.json may be, in the order looked for, with the folder it is in. */
const DEVCONTAINER_PLACES = [
  ['.devcontainer/devcontainer.json', '.devcontainer'],
  ['.devcontainer.json', ''],
  ['devcontainer.json', ''],
] as const;

/** An entry kept from the archive. */
export interface ContextEntry {
  /** Inside the archive: relative, normalised, no `./` before and no `/` after. */
  path: string;
  type: 'file' | 'directory' | 'symlink' | 'link';
  /** The content's bytes (a hard link: its file's); 0 for folders and symbolic links. */
  size: number;
  /** Permission bits (0o777 at most). */
  mode: number;
  mtime?: Date;
  /** A symbolic link: its target as written; a hard link: the path of its file. */
  linkname?: string;
}

export interface ContextUpload {
  /** devcontainer.json's text. */
  devcontainer: string;
  /** The folder it was in: '.devcontainer', or '' for the archive's root. */
  folder: '' | '.devcontainer';
  /** The entries kept, in the archive's order. */
  files: ContextEntry[];
  /**
   * Whether `path` (relative to the archive's root, posix, normalised) is a regular file, following
   * symbolic links: parseDevcontainer's `contextFiles`.
   */
  has(path: string): boolean;
  /**
   * Refuses (ValidationError) a build context folder (a path inside the archive, '' for its root, as
   * parseDevcontainer's `build.context`) that is no folder of the archive, or that has a symbolic
   * link leading out of it.
   */
  checkContext(context: string): void;
  /**
   * The tar of the build context folder for the engine's build API, its paths relative to the
   * folder; checkContext first (it throws at once). Hard links are written as regular files. Can be
   * called again, until close().
   */
  contextTar(context: string): Readable;
  /** Removes the kept content; contextTar streams not yet read fail. */
  close(): Promise<void>;
}

export interface ReadContextOptions {
  /** Default MAX_CONTEXT_BYTES. */
  maxBytes?: number;
  /** Default MAX_CONTEXT_ENTRIES. */
  maxEntries?: number;
}

interface Kept {
  entry: ContextEntry;
  /** The file holding the content (regular files and hard links with content). */
  blob?: string;
}

const refuse = (problem: string) => new ValidationError(`${FIELD}: ${problem}`, FIELD);

/**
 * Reads an uploaded archive (see the top of this file) to its end, or until it is refused: then
 * the source is left as it is, not destroyed, for the caller to answer on the same request and
 * close it. Throws ValidationError (422) or PayloadTooLargeError (413); nothing is left behind then.
 */
export async function readContextTar(source: Readable, opts: ReadContextOptions = {}): Promise<ContextUpload> {
  const dir = await mkdtemp(path.join(tmpdir(), 'berth-context-'));
  try {
    const kept = await extractAll(source, dir, opts.maxBytes ?? MAX_CONTEXT_BYTES, opts.maxEntries ?? MAX_CONTEXT_ENTRIES);
    checkTree(kept);
    const [file, folder] = DEVCONTAINER_PLACES.find(([p]) => kept.has(p)) ?? [];
    if (file === undefined || folder === undefined) {
      throw new ValidationError(
        `devcontainer.json: not found in the upload (looked for ${DEVCONTAINER_PLACES.map(([p]) => p).join(', ')})`,
        'devcontainer.json',
      );
    }
    const found = kept.get(file)!;
    if (found.entry.type !== 'file' && found.entry.type !== 'link') {
      throw new ValidationError(`devcontainer.json: ${show(file)} must be a regular file`, 'devcontainer.json');
    }
    if (found.entry.size > MAX_DEVCONTAINER_BYTES)
      throw new ValidationError('devcontainer.json: is larger than 1 MiB', 'devcontainer.json');
    const devcontainer = found.blob ? await readFile(found.blob, 'utf8') : '';
    return new Upload(dir, kept, devcontainer, folder);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** Every entry of the archive, checked one by one as they come; bodies are written to `dir`. */
async function extractAll(source: Readable, dir: string, maxBytes: number, maxEntries: number): Promise<Map<string, Kept>> {
  const extract = tar.extract();
  const kept = new Map<string, Kept>();
  let failure: unknown;
  // The parser's own error says more than the "Stream was destroyed" of the entry being read.
  let parserError: Error | undefined;
  extract.on('error', (err: Error) => {
    parserError ??= err;
  });
  const consuming = (async () => {
    let entries = 0;
    for await (const body of extract) {
      if (++entries > maxEntries) throw new PayloadTooLargeError(`the upload holds more than ${maxEntries} entries`);
      const { header } = body;
      const rel = entryPath(header.name);
      if (rel === '' && header.type !== 'directory') throw refuse('the root of the archive must be a folder');
      const entry: ContextEntry = { path: rel, type: 'file', size: 0, mode: (header.mode ?? 0o644) & 0o777 };
      if (header.mtime) entry.mtime = header.mtime;
      const item: Kept = { entry };
      switch (header.type) {
        case 'file':
        case 'contiguous-file':
          entry.size = header.size ?? 0;
          if (entry.size > 0)
            item.blob = await writeBody(body as unknown as AsyncIterable<Buffer>, path.join(dir, String(entries)), entry.size);
          break;
        case 'directory':
          entry.type = 'directory';
          break;
        case 'symlink':
          entry.type = 'symlink';
          entry.linkname = header.linkname ?? '';
          if (linkProblem(rel, entry.linkname))
            throw refuse(`the symbolic link ${show(rel)} → ${show(entry.linkname)} leads out of the archive`);
          break;
        case 'link': {
          const target = linkTarget(rel, header.linkname ?? '', kept);
          entry.type = 'link';
          entry.linkname = target.entry.path;
          entry.size = target.entry.size;
          if (target.blob) item.blob = target.blob;
          break;
        }
        default:
          throw refuse(`entry ${show(rel)} is a ${header.type}; only files, folders and links are accepted`);
      }
      // The rest of a body not written (a folder's or a link's, normally none) is skipped.
      for await (const _ of body);
      if (rel === '') continue; // the root folder itself
      // A later entry of the same path replaces the earlier one, and comes after the others.
      kept.delete(rel);
      kept.set(rel, item);
    }
  })().catch((err: unknown) => {
    failure ??= err;
    extract.destroy();
    stop();
  });

  // Read without destroying the source on return: the caller still answers on its request. A
  // refusal stops the reading at once, not at the next piece the sender sends.
  let stop = () => {};
  const stopped = new Promise<null>((resolve) => {
    stop = () => resolve(null);
  });
  const pieces = source.iterator({ destroyOnReturn: false }) as AsyncIterator<Buffer>;
  let bytes = 0;
  for (;;) {
    const next = await Promise.race([pieces.next(), stopped]);
    if (next === null || next.done) break;
    bytes += next.value.length;
    if (bytes > maxBytes) {
      failure ??= new PayloadTooLargeError(`the upload is larger than ${formatLimit(maxBytes)}`);
      extract.destroy();
      break;
    }
    if (!extract.write(next.value)) await drained(extract);
  }
  if (failure) void pieces.return?.().catch(() => {});
  else (extract as unknown as NodeJS.WritableStream).end();
  await consuming;
  if (failure) throw failure instanceof DomainError ? failure : archiveError(parserError ?? (failure as Error));
  return kept;
}

function formatLimit(bytes: number): string {
  return bytes % MIB === 0 ? `${bytes / MIB} MiB` : `${bytes} bytes`;
}

/** Resolves once the extractor takes more (or is gone). */
function drained(extract: tar.Extract): Promise<void> {
  if (extract.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      extract.off('drain', done);
      extract.off('close', done);
      resolve();
    };
    extract.on('drain', done);
    extract.on('close', done);
  });
}

/** An error of the tar parser: the sender's mistake, 422. */
function archiveError(err: Error): ValidationError {
  if (/unexpected end/i.test(err.message)) return refuse('the archive is truncated');
  return refuse(`not a valid tar archive (${err.message}); send an uncompressed tar`);
}

/** Writes an entry's body to `file`; exactly `size` bytes or the archive is truncated. */
async function writeBody(body: AsyncIterable<Buffer>, file: string, size: number): Promise<string> {
  const handle = await open(file, 'wx', 0o600);
  try {
    let written = 0;
    for await (const piece of body) {
      await handle.write(piece);
      written += piece.length;
    }
    if (written !== size) throw refuse('the archive is truncated');
  } finally {
    await handle.close();
  }
  return file;
}

/** An entry's name as a path inside the archive ('' its root), or a refusal naming it. */
function entryPath(name: string): string {
  if (name.startsWith('/')) throw refuse(`entry ${show(name)} has an absolute path`);
  if (Buffer.byteLength(name) > MAX_PATH_BYTES) throw refuse(`entry ${show(name)} has a path longer than ${MAX_PATH_BYTES} bytes`);
  if (name.includes('\0')) throw refuse(`entry ${show(name)} has a NUL character in its path`);
  const normal = path.posix.normalize(name);
  if (normal === '..' || normal.startsWith('../')) throw refuse(`entry ${show(name)} climbs out of the archive with ".."`);
  return normal === '.' || normal === './' ? '' : normal.replace(/\/+$/, '');
}

/** Whether the symbolic link at `rel` to `target` leads out of the archive, read as written. */
function linkProblem(rel: string, target: string): boolean {
  if (target === '' || target.startsWith('/') || target.includes('\0')) return true;
  const joined = path.posix.normalize(path.posix.join(path.posix.dirname(rel), target));
  return joined === '..' || joined.startsWith('../');
}

/** A hard link's file: an entry before it, inside the archive, that is a regular file. */
function linkTarget(rel: string, linkname: string, kept: Map<string, Kept>): Kept {
  let target: string;
  try {
    target = entryPath(linkname);
  } catch {
    throw refuse(`the hard link ${show(rel)} → ${show(linkname)} leads out of the archive`);
  }
  const found = kept.get(target);
  if (!found) throw refuse(`the hard link ${show(rel)} → ${show(linkname)} names no entry before it`);
  if (found.entry.type !== 'file' && found.entry.type !== 'link') {
    throw refuse(`the hard link ${show(rel)} → ${show(linkname)} names a ${found.entry.type}, not a file`);
  }
  return found;
}

/**
 * The checks that need every entry: no entry lies under a symbolic link or a file, and every
 * symbolic link resolves inside the archive, through the other links.
 */
function checkTree(kept: Map<string, Kept>): void {
  for (const [rel] of kept) {
    for (let slash = rel.indexOf('/'); slash >= 0; slash = rel.indexOf('/', slash + 1)) {
      const parent = kept.get(rel.slice(0, slash));
      if (parent && parent.entry.type !== 'directory') {
        const what = parent.entry.type === 'symlink' ? 'a symbolic link' : 'a file';
        throw refuse(`entry ${show(rel)} lies under ${show(parent.entry.path)}, which is ${what}`);
      }
    }
  }
  const links = symlinks(kept);
  for (const [rel, target] of links) {
    if (resolve(path.posix.dirname(rel), target, links) === null) {
      throw refuse(`the symbolic link ${show(rel)} → ${show(target)} leads out of the archive`);
    }
  }
}

function symlinks(kept: Map<string, Kept>): Map<string, string> {
  const links = new Map<string, string>();
  for (const [rel, { entry }] of kept) if (entry.type === 'symlink') links.set(rel, entry.linkname!);
  return links;
}

/**
 * `target` resolved from the folder `from` (both inside the archive, '' or '.' its root), following
 * the archive's symbolic links as the kernel would: the resolved path, or null when it leads out
 * of the root (or through too many links).
 */
function resolve(from: string, target: string, links: Map<string, string>): string | null {
  if (target.startsWith('/')) return null;
  const stack = from === '.' || from === '' ? [] : from.split('/');
  const queue = target.split('/');
  let hops = 0;
  while (queue.length > 0) {
    const part = queue.shift()!;
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (stack.length === 0) return null;
      stack.pop();
      continue;
    }
    stack.push(part);
    const link = links.get(stack.join('/'));
    if (link === undefined) continue;
    if (++hops > MAX_LINK_HOPS || link.startsWith('/')) return null;
    stack.pop();
    queue.unshift(...link.split('/'));
  }
  return stack.join('/');
}

class Upload implements ContextUpload {
  readonly files: ContextEntry[];
  private readonly links: Map<string, string>;

  constructor(
    private readonly dir: string,
    private readonly kept: Map<string, Kept>,
    readonly devcontainer: string,
    readonly folder: '' | '.devcontainer',
  ) {
    this.files = [...kept.values()].map((k) => k.entry);
    this.links = symlinks(kept);
  }

  has(rel: string): boolean {
    const resolved = resolve('', rel, this.links);
    const found = resolved === null ? undefined : this.kept.get(resolved);
    return found?.entry.type === 'file' || found?.entry.type === 'link';
  }

  checkContext(context: string): void {
    const field = 'devcontainer.build.context';
    const normal = path.posix.normalize(context || '.');
    if (normal.startsWith('/') || normal === '..' || normal.startsWith('../')) {
      throw new ValidationError(`${field}: ${show(context)} leads out of the upload`, field);
    }
    const root = normal === '.' ? '' : normal.replace(/\/+$/, '');
    const inside = (p: string) => root === '' || p === root || p.startsWith(`${root}/`);
    if (root !== '') {
      const self = this.kept.get(root);
      if (self ? self.entry.type !== 'directory' : !this.files.some((f) => f.path.startsWith(`${root}/`))) {
        throw new ValidationError(`${field}: ${show(root)} is not a folder of the upload`, field);
      }
    }
    for (const [rel, target] of this.links) {
      if (!inside(rel) || rel === root) continue;
      const resolved = resolve(path.posix.dirname(rel), target, this.links);
      if (resolved === null || !inside(resolved)) {
        throw refuse(`the symbolic link ${show(rel)} → ${show(target)} leads out of the build context ${show(root || '.')}`);
      }
    }
  }

  contextTar(context: string): Readable {
    this.checkContext(context);
    const root = path.posix.normalize(context || '.').replace(/\/+$/, '');
    const prefix = root === '.' ? '' : `${root}/`;
    const items = [...this.kept.values()].filter((k) => k.entry.path.startsWith(prefix));
    const pack = tar.pack();
    (async () => {
      for (const { entry, blob } of items) {
        const name = entry.path.slice(prefix.length);
        const header = { name, mode: entry.mode, mtime: entry.mtime, uid: 0, gid: 0 };
        if (entry.type === 'directory') await add(pack, { ...header, type: 'directory' });
        else if (entry.type === 'symlink') await add(pack, { ...header, type: 'symlink', linkname: entry.linkname! });
        else await add(pack, { ...header, type: 'file', size: entry.size }, blob);
      }
      pack.finalize();
    })().catch((err: Error) => pack.destroy(err));
    // tar-stream streams are streamx streams; this makes a Node stream of it for pipeline().
    return Readable.from(pack as AsyncIterable<Buffer>, { objectMode: false });
  }

  close(): Promise<void> {
    return rm(this.dir, { recursive: true, force: true });
  }
}

/**
 * The build context's tar (contextTar) in one Buffer, for a caller that keeps it past close(): the
 * stream is read twice, once to count its bytes and once into a Buffer of exactly that size, so
 * the context is in memory once, never also as a list of pieces being joined.
 */
export async function buildContextTar(upload: ContextUpload, context: string): Promise<Buffer> {
  let size = 0;
  for await (const piece of upload.contextTar(context)) size += (piece as Buffer).length;
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for await (const piece of upload.contextTar(context)) {
    const bytes = piece as Buffer;
    if (at + bytes.length > size) throw new Error('the build context changed while it was read');
    bytes.copy(out, at);
    at += bytes.length;
  }
  if (at !== size) throw new Error('the build context changed while it was read');
  return out;
}

/** Adds one entry to `pack`, its body read from `blob` (none: empty). */
function add(pack: tar.Pack, header: Partial<tar.Header> & { name: string }, blob?: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const done = (err?: Error | null) => (err ? reject(err) : resolve());
    if (!blob) return void pack.entry(header, '', done);
    const sink = pack.entry(header, done);
    createReadStream(blob)
      .on('error', reject)
      .pipe(sink as unknown as NodeJS.WritableStream);
  });
}
