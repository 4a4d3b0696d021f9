// Share sync over one byte stream (docs/agents.md, "Share sync"): the sender walks a folder by its
// sync rules and sends a tar stream; the receiver writes it into its folder and acknowledges.
//
//   sender -> receiver: a tar stream (tar-stream). Regular-file entries are files to write (path
//     relative to the share, mode, mtime, bytes); an entry with pax `berth.op=delete` removes the
//     file at its path; an entry with pax `berth.op=mark` and `berth.seq=N` ends a batch; a FIFO
//     entry with pax `berth.op=skip` and `berth.kind` names a special file the rules select, which
//     is never sent (once, until it is gone; receivers that do not know it ignore a FIFO entry).
//   receiver -> sender: one JSON line `{"ack":N}` once everything before mark N is on disk.
//
// The first batch is the whole selection; with `watch` the sender then rescans after every change
// has settled (settleMs without events) and sends what differs from what it sent (size, mtime or
// mode changed, new files) and deletes for files gone. A watcher can miss an event (inotify drops
// them when its queue overflows), so the sender also rescans when nothing happened for a while
// (RESCAN_MS, or 20 times the last scan's duration for a tree that takes long to scan). A `final` sender ends the stream after the
// first batch is acknowledged. The receiver writes each file to a temporary name and renames it,
// so a reader never sees half a file. Either side works in its folder beneath it (beneath.ts): no
// link is followed, and nothing but a regular file is opened, whatever the folder's owner changes
// meanwhile.
import { once } from 'node:events';
import { closeSync, fchmodSync, fchownSync, futimesSync, openSync, readSync, renameSync, writeSync } from 'node:fs';
import { lstat, mkdir, open, unlink } from 'node:fs/promises';
import path from 'node:path';
import { Duplex } from 'node:stream';
import { type FSWatcher, watch } from 'chokidar';
import * as tar from 'tar-stream';
import { DEFAULT_IGNORES, type SyncRules, selectFiles, validateRelativePath } from '../kernel/sync-rules';
import { Beneath, type Kind, NEW_FILE, openRegular, openRegularSync, replace } from './beneath';

/** Files up to this size are read whole; larger ones are streamed. */
const SMALL_FILE = 512 * 1024;
/** The process's umask, read once (files are created with mode & ~umask). */
const UMASK = (() => {
  const mask = process.umask(0o022);
  process.umask(mask);
  return mask;
})();
const READ_CHUNK = 256 * 1024;
/** A watching sender rescans at least this often (more seldom for a tree whose scan takes long). */
export const RESCAN_MS = 10_000;
const OP = 'berth.op';
const SEQ = 'berth.seq';
const KIND = 'berth.kind';
/** What a `skip` entry may say a file is. */
const SPECIAL_KINDS: ReadonlySet<string> = new Set<Kind>(['FIFO', 'socket', 'device']);
const EMPTY = Buffer.alloc(0);

type Header = Partial<tar.Header> & { name: string; pax?: Record<string, string> };

interface IndexEntry {
  size: number;
  mtimeMs: number;
  mode: number;
  /** Absolute path to read, when it is not `root/path` (an extra file). */
  source?: string;
}

type Index = Map<string, IndexEntry>;

/** One scan: the files to send, and the special files the rules select (never sent). */
interface Scan {
  files: Index;
  special: Map<string, Kind>;
}

export interface SyncStats {
  files: number;
  bytes: number;
  deletes: number;
  batches: number;
  /** Special files the sender named and did not send. */
  skipped: number;
}

export interface SendOptions {
  /** The folder to send. Made when missing. */
  root: string;
  /** What to send; `files` keys are destinations of extra files (see `extras`). */
  rules: SyncRules;
  /** Extra files: destination (relative to the share) -> absolute source path. */
  extras?: Record<string, string>;
  /** A top-level name of `root` never sent, whatever the rules select (the sandbox agent's own folder). */
  withhold?: string;
  /** Keep watching and sending changes until `signal` aborts or the stream ends. */
  watch: boolean;
  /** End the stream once the first batch is acknowledged. */
  final?: boolean;
  /** How long the folder must be quiet before a rescan (default 200 ms). */
  settleMs?: number;
  /** The longest time without a rescan while watching (default RESCAN_MS; see the top). */
  rescanMs?: number;
  signal?: AbortSignal;
  /** Called after each acknowledged batch. */
  onSynced?(stats: SyncStats): void;
  /** Called for each special file (FIFO, socket, device) the rules select: never sent. */
  onSkipped?(path: string, kind: Kind): void;
}

/** The longest line an acknowledgement may be. */
const MAX_ACK_LINE = 1024;

/** Reads `{"ack":N}` lines from `channel`. */
function ackReader(channel: Duplex) {
  let acked = 0;
  let ended = false;
  let buffered = '';
  const waiters: { seq: number; resolve: () => void; reject: (e: Error) => void }[] = [];
  const settle = () => {
    for (const w of [...waiters]) {
      if (w.seq <= acked) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      } else if (ended) {
        waiters.splice(waiters.indexOf(w), 1);
        w.reject(new Error('the receiver ended before acknowledging'));
      }
    }
  };
  channel.on('data', (chunk: Buffer) => {
    buffered += chunk.toString('utf8');
    let nl = buffered.indexOf('\n');
    while (nl >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      nl = buffered.indexOf('\n');
      try {
        const seq = (JSON.parse(line) as { ack?: unknown }).ack;
        if (typeof seq === 'number' && seq > acked) acked = seq;
      } catch {
        // not an ack; ignored
      }
    }
    // An ack is a few bytes: a receiver that sends more without a line end is not one, and is cut
    // off like one that went away (this side may be the server: its memory must not grow).
    if (buffered.length > MAX_ACK_LINE) {
      buffered = '';
      channel.destroy();
    }
    settle();
  });
  const end = () => {
    ended = true;
    settle();
  };
  channel.on('end', end);
  channel.on('close', end);
  return {
    until: (seq: number) =>
      new Promise<void>((resolve, reject) => {
        waiters.push({ seq, resolve, reject });
        settle();
      }),
  };
}

/** The files the rules select under `root`, plus the extras (which win over a walked file). */
async function scan(root: string, rules: SyncRules, extras: Record<string, string>, withhold?: string): Promise<Scan> {
  const index: Index = new Map();
  const special = new Map<string, Kind>();
  const held = (rel: string) => withhold !== undefined && (rel === withhold || rel.startsWith(`${withhold}/`));
  const files = selectFiles(root, rules, { special: (rel, kind) => void (held(rel) || special.set(rel, kind)) });
  for await (const f of files) {
    if (held(f.path)) continue;
    index.set(f.path, { size: f.size, mtimeMs: f.mtimeMs, mode: f.mode });
  }
  for (const [dest, source] of Object.entries(extras)) {
    const st = await lstat(source).catch(() => null);
    if (st?.isFile()) index.set(dest, { size: st.size, mtimeMs: st.mtimeMs, mode: st.mode & 0o777, source });
    else index.delete(dest);
  }
  return { files: index, special };
}

function sameEntry(a: IndexEntry, b: IndexEntry): boolean {
  return a.size === b.size && a.mtimeMs === b.mtimeMs && a.mode === b.mode && a.source === b.source;
}

function entryPromise(pack: tar.Pack, header: Header, body?: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const cb = (err?: Error | null) => (err ? reject(err) : resolve());
    if (body) pack.entry(header, body, cb);
    else pack.entry(header, cb);
  });
}

/** The file's path beneath the folder, or '' when a name on its way is no longer a folder. */
function beneathFile(beneath: Beneath, rel: string): string {
  try {
    return beneath.file(rel);
  } catch {
    return '';
  }
}

/**
 * Writes one file entry: small files whole, large ones streamed at exactly the size recorded. The
 * file is opened only if it is a regular file (never a link, a FIFO); -1 when it is not one now.
 */
async function packFile(pack: tar.Pack, rel: string, file: string, entry: IndexEntry): Promise<number> {
  if (!file) return -1;
  const header = { name: rel, mode: entry.mode, mtime: new Date(entry.mtimeMs), type: 'file' as const };
  if (entry.size <= SMALL_FILE) {
    // Small: cheaper than four round trips through the thread pool.
    const opened = openRegularSync(file);
    if (!opened) return -1;
    // At most what a small file may be: one that grew since the scan is cut (the next scan sends it).
    let body = Buffer.allocUnsafe(Math.min(opened.stats.size, SMALL_FILE));
    try {
      body = body.subarray(0, readSync(opened.fd, body, 0, body.length, 0));
    } finally {
      closeSync(opened.fd);
    }
    await entryPromise(pack, { ...header, size: body.length }, body);
    return body.length;
  }
  const fh = (await openRegular(file))?.handle;
  if (!fh) return -1;
  try {
    let sinkError: Error | undefined;
    const done = new Promise<void>((resolve, reject) => {
      const sink = pack.entry({ ...header, size: entry.size }, (err) => (err ? reject(err) : resolve()));
      void (async () => {
        // A file that shrinks while it is read is padded with zeros, one that grows is cut, so
        // the entry always has the size in its header; the next scan sends it again.
        let at = 0;
        while (at < entry.size) {
          const want = Math.min(READ_CHUNK, entry.size - at);
          const buf = Buffer.alloc(want);
          const { bytesRead } = await fh.read(buf, 0, want, at);
          const chunk = bytesRead === 0 ? buf : buf.subarray(0, bytesRead);
          at += chunk.length;
          if (!sink.write(chunk)) await once(sink as unknown as NodeJS.EventEmitter, 'drain');
        }
        sink.end(Buffer.alloc(0));
      })().catch((err: Error) => {
        sinkError = err;
        sink.destroy(err);
      });
    });
    await done;
    if (sinkError) throw sinkError;
    return entry.size;
  } finally {
    await fh.close();
  }
}

/** Segments of folders a watcher need not look into (ignored by default and no include reaches them). */
function watchIgnored(rules: SyncRules): (p: string) => boolean {
  if (rules.noIgnore) return () => false;
  const names = DEFAULT_IGNORES.map((p) => p.replace(/\/$/, ''));
  const reached = names.filter((name) => rules.include.some((inc) => inc.startsWith('**') || inc.split('/').includes(name)));
  const skip = new Set(names.filter((n) => !reached.includes(n)));
  return (p) => p.split(path.sep).some((segment) => skip.has(segment));
}

/**
 * Sends the folder over `channel` (see the top of this file). Resolves when the stream ended
 * (final), the signal aborted or the receiver went away; rejects on a read or stream error.
 */
export async function sendFolder(channel: Duplex, opts: SendOptions): Promise<SyncStats> {
  const extras = opts.extras ?? {};
  await mkdir(opts.root, { recursive: true });
  const pack = tar.pack();
  const stats: SyncStats = { files: 0, bytes: 0, deletes: 0, batches: 0, skipped: 0 };
  const acks = ackReader(channel);
  let closed = false;
  const gone = new Promise<void>((resolve) => {
    const stop = () => {
      closed = true;
      resolve();
    };
    channel.once('close', stop);
    channel.once('error', stop);
    opts.signal?.addEventListener('abort', stop, { once: true });
  });
  pack.on('data', (chunk: unknown) => {
    if (closed) return;
    if (!channel.write(chunk as Buffer)) {
      pack.pause();
      channel.once('drain', () => pack.resume());
    }
  });
  pack.on('end', () => channel.end());

  let sent: Index = new Map();
  /** Special files named to the receiver, until they are gone. */
  let named = new Set<string>();
  let seq = 0;
  let scanMs = 0;
  const batch = async (): Promise<number> => {
    const scanned = performance.now();
    const { files: now, special } = await scan(opts.root, opts.rules, extras, opts.withhold);
    scanMs = performance.now() - scanned;
    const before0 = stats.files + stats.deletes + stats.skipped;
    // Files of the folder are read beneath it, never through a link (a folder the other side may change).
    const beneath = Beneath.open(opts.root);
    try {
      for (const [rel, entry] of now) {
        if (closed) return seq;
        const before = sent.get(rel);
        if (before && sameEntry(before, entry)) continue;
        const size = await packFile(pack, rel, entry.source ?? beneathFile(beneath, rel), entry);
        if (size < 0) {
          now.delete(rel); // gone while we scanned; the next scan sees it
          continue;
        }
        stats.files++;
        stats.bytes += size;
      }
    } finally {
      beneath.close();
    }
    for (const rel of sent.keys()) {
      if (closed) return seq;
      if (now.has(rel)) continue;
      await entryPromise(pack, { name: rel, size: 0, type: 'file', pax: { [OP]: 'delete' } }, EMPTY);
      stats.deletes++;
    }
    for (const [rel, kind] of special) {
      if (closed) return seq;
      if (named.has(rel)) continue;
      opts.onSkipped?.(rel, kind);
      await entryPromise(pack, { name: rel, size: 0, type: 'fifo', pax: { [OP]: 'skip', [KIND]: kind } }, EMPTY);
      stats.skipped++;
    }
    named = new Set(special.keys());
    const changed = stats.files + stats.deletes + stats.skipped !== before0;
    sent = now;
    // A rescan that found nothing to send says nothing (the first batch always ends with a mark).
    if (seq > 0 && !changed) return seq;
    seq++;
    await entryPromise(pack, { name: '.berth-mark', size: 0, type: 'file', pax: { [OP]: 'mark', [SEQ]: String(seq) } }, EMPTY);
    return seq;
  };
  const acknowledged = async (n: number) => {
    await Promise.race([acks.until(n), gone]);
    if (!closed) {
      stats.batches = n;
      opts.onSynced?.({ ...stats });
    }
  };

  let watcher: FSWatcher | undefined;
  try {
    const first = await batch();
    if (opts.final || !opts.watch) {
      await acknowledged(first);
      if (!closed) {
        pack.finalize();
        await Promise.race([once(channel, 'finish'), gone]);
      }
      return stats;
    }
    void acknowledged(first).catch(() => undefined);
    const settleMs = opts.settleMs ?? 200;
    let timer: NodeJS.Timeout | undefined;
    let running: Promise<void> | undefined;
    let again = false;
    const rescan = (): void => {
      if (closed) return;
      if (running) {
        again = true;
        return;
      }
      running = (async () => {
        try {
          const previous = seq;
          const n = await batch();
          if (n > previous) void acknowledged(n).catch(() => undefined);
        } finally {
          running = undefined;
          if (again) {
            again = false;
            schedule();
          }
        }
      })().catch((err: Error) => {
        channel.destroy(err);
      });
    };
    let backstop: NodeJS.Timeout | undefined;
    const schedule = () => {
      clearTimeout(timer);
      timer = setTimeout(rescan, settleMs);
      // What a watcher missed is found by a rescan once the folder has been quiet this long.
      clearTimeout(backstop);
      backstop = setTimeout(schedule, Math.max(opts.rescanMs ?? RESCAN_MS, 20 * scanMs));
    };
    watcher = watch([opts.root, ...Object.values(extras)], {
      ignoreInitial: true,
      ignored: watchIgnored(opts.rules),
      // A link in the folder is a name, never a way into what it points at.
      followSymlinks: false,
      persistent: true,
    });
    watcher.on('all', schedule);
    watcher.on('error', () => schedule());
    // Changes between the first scan and the watcher being ready are caught by one more scan.
    watcher.once('ready', schedule);
    await gone;
    clearTimeout(timer);
    clearTimeout(backstop);
    await running;
    return stats;
  } finally {
    await watcher?.close();
    if (!pack.destroyed && closed) pack.destroy();
  }
}

export interface ReceiveOptions {
  /** The folder to write into. Made when missing. */
  root: string;
  /** Called after each batch is on disk. */
  onBatch?(stats: SyncStats): void;
  /** Called for each special file the sender named and did not send. */
  onSkipped?(path: string, kind: Kind): void;
}

/** Writes what a sender sends into `root` until the sender ends the stream. */
export async function receiveFolder(channel: Duplex, opts: ReceiveOptions): Promise<SyncStats> {
  const root = path.resolve(opts.root);
  await mkdir(root, { recursive: true });
  const stats: SyncStats = { files: 0, bytes: 0, deletes: 0, batches: 0, skipped: 0 };
  const extract = tar.extract();
  channel.pipe(extract as unknown as NodeJS.WritableStream);
  channel.on('error', (err) => extract.destroy(err));
  channel.on('close', () => {
    if (!channel.readableEnded) extract.destroy(new Error('the sender went away'));
  });
  // The environment may change the folder meanwhile: names resolve beneath it only (beneath.ts).
  const beneath = Beneath.open(root);
  let counter = 0;
  try {
    for await (const entry of extract) {
      const header = entry.header as Header;
      const op = header.pax?.[OP];
      if (op === 'mark') {
        entry.resume();
        stats.batches++;
        const seq = Number(header.pax?.[SEQ] ?? 0);
        if (!channel.destroyed) channel.write(`${JSON.stringify({ ack: seq })}\n`);
        opts.onBatch?.({ ...stats });
        continue;
      }
      let rel: string;
      try {
        rel = validateRelativePath(header.name, 'path');
      } catch {
        entry.resume();
        continue; // never outside the folder
      }
      if (op === 'skip') {
        entry.resume();
        const kind = header.pax?.[KIND] ?? '';
        stats.skipped++;
        opts.onSkipped?.(rel, SPECIAL_KINDS.has(kind) ? (kind as Kind) : 'device');
        continue;
      }
      if (op === 'delete') {
        entry.resume();
        let target: string;
        try {
          target = beneath.file(rel);
        } catch {
          continue; // its folder is gone, or is no folder: nothing of it to delete
        }
        const st = await lstat(target).catch(() => null);
        if (st && !st.isDirectory()) {
          await unlink(target).catch(() => undefined);
          stats.deletes++;
        }
        continue;
      }
      if (header.type !== 'file' && header.type !== 'contiguous-file') {
        entry.resume();
        continue;
      }
      const folder = beneath.folder(path.posix.dirname(rel), true);
      const target = `${folder}/${path.posix.basename(rel)}`;
      const tmp = `${folder}/.berth-${process.pid}-${counter++}.tmp`;
      const mode = (header.mode ?? 0o644) & 0o777;
      const mtime = header.mtime ?? new Date();
      let bytes = 0;
      if ((header.size ?? 0) <= SMALL_FILE) {
        // Small files (most of a source tree) are written with synchronous calls: one entry is a
        // few microseconds of work, and a round trip through the thread pool per call would cost
        // more than the call itself.
        const chunks: Buffer[] = [];
        for await (const chunk of entry) chunks.push(chunk as Buffer);
        const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
        bytes = body.length;
        const fd = openSync(tmp, NEW_FILE, mode);
        try {
          if (beneath.owner) fchownSync(fd, beneath.owner.uid, beneath.owner.gid);
          writeSync(fd, body);
          if ((mode & ~UMASK) !== mode) fchmodSync(fd, mode);
          futimesSync(fd, mtime, mtime);
        } finally {
          closeSync(fd);
        }
      } else {
        const fh = await open(tmp, NEW_FILE, mode);
        try {
          if (beneath.owner) await fh.chown(beneath.owner.uid, beneath.owner.gid);
          for await (const chunk of entry) {
            bytes += (chunk as Buffer).length;
            await fh.write(chunk as Buffer);
          }
          await fh.chmod(mode);
          await fh.utimes(mtime, mtime);
        } finally {
          await fh.close();
        }
      }
      try {
        renameSync(tmp, target);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code !== 'EISDIR' && code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error;
        // A folder stands where the file goes: the file wins (the folder removed beneath it).
        beneath.forget(rel);
        await replace(tmp, folder, path.posix.basename(rel));
      }
      stats.files++;
      stats.bytes += bytes;
    }
  } finally {
    beneath.close();
  }
  channel.end();
  return stats;
}

/**
 * Two connected Duplex streams: what one writes the other reads, with backpressure (Node 20
 * has no stream.duplexPair).
 */
export function duplexPair(): [Duplex, Duplex] {
  const pending: ((() => void) | undefined)[] = [undefined, undefined];
  const sides: Duplex[] = [];
  for (const i of [0, 1]) {
    const other = 1 - i;
    sides.push(
      new Duplex({
        allowHalfOpen: true,
        read() {
          // The other side may write again.
          const cb = pending[other];
          pending[other] = undefined;
          cb?.();
        },
        write(chunk: Buffer, _enc, cb) {
          if (sides[other]!.push(chunk)) cb();
          else pending[i] = cb;
        },
        final(cb) {
          sides[other]!.push(null);
          cb();
        },
        destroy(err, cb) {
          if (!sides[other]!.destroyed) sides[other]!.destroy(err ?? undefined);
          cb(err);
        },
      }),
    );
  }
  return [sides[0]!, sides[1]!];
}
