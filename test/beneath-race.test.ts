// The node's work in a share folder against a build that races it (src/dataplane/beneath.ts): while
// racers swap a folder with a link to a host folder, and a file with a FIFO, with
// renameat2(RENAME_EXCHANGE) as fast as they can, every operation on the tree (snapshot save and
// restore, share sync both ways, ownership, disk count, removal) runs again and again. Nothing of
// the host folder may change, be read or be written, and the FIFO is never opened for reading (so
// nothing ever blocked on it: the racer would have seen the reader waiting).
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chownTree, removeTree } from '../src/dataplane/beneath';
import { duplexPair, receiveFolder, sendFolder } from '../src/dataplane/folder-sync';
import { selectFiles } from '../src/kernel/sync-rules';
import { DiskCount } from '../src/node/disk-count';
import { archiveStream, extractArchive } from '../src/protocol/snapshot-archive';

const ROUNDS = 60;
const SECRET = 'the host secret';
const BIG = 1 << 20;

const gcc = spawnSync('gcc', ['--version']).status === 0;
if (!gcc) console.warn('beneath-race: gcc is missing (apt-get install gcc): the race tests are skipped');

let dir: string;
let racerBinary: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-race-'));
  racerBinary = join(dir, 'rename-racer');
  if (!gcc) return;
  const built = spawnSync('gcc', ['-static', '-O2', '-Wall', '-o', racerBinary, join(import.meta.dirname, 'fixtures', 'rename-racer.c')], {
    encoding: 'utf8',
  });
  if (built.status !== 0) throw new Error(`cannot build the racer: ${built.stderr}`);
});
afterAll(() => rm(dir, { recursive: true, force: true }));

interface Racer {
  /** Stops it: how many swaps it made, and how many times it found the FIFO held open for reading. */
  stop(): Promise<{ swaps: number; held: number }>;
}

async function race(cwd: string, a: string, b: string, fifo = false): Promise<Racer> {
  // Whole paths: the folder may be removed and made again while it races.
  const names = [join(cwd, a), join(cwd, b)];
  const child: ChildProcess = spawn(racerBinary, fifo ? [...names, 'fifo'] : names, { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = once(child, 'exit');
  // Swapping before the operations start.
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', () => out.startsWith('ready\n') && resolve());
    child.once('exit', () => reject(new Error(`the racer ended: ${out}`)));
  });
  return {
    async stop() {
      child.kill('SIGTERM');
      await exited;
      const [swaps, held] = out.slice('ready\n'.length).trim().split(' ').map(Number);
      return { swaps: swaps!, held: held! };
    },
  };
}

/** Everything under `root` as lstat and content show it: what a hostile build must never change. */
async function inventory(root: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const visit = async (path: string, rel: string): Promise<void> => {
    const st = await lstat(path);
    const content = st.isFile()
      ? createHash('sha256')
          .update(await readFile(path))
          .digest('hex')
      : '';
    out[rel] = `${st.uid}:${st.gid} ${st.mode.toString(8)} ${st.size} ${content}`;
    if (st.isDirectory()) for (const name of await readdir(path)) await visit(join(path, name), `${rel}/${name}`);
  };
  await visit(root, '.');
  return out;
}

/** Every file's path and content under `root`, to look for what came from the host folder. */
async function contents(root: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(root, { recursive: true, withFileTypes: true })) {
    const path = join(entry.parentPath, entry.name);
    found.push(path.slice(root.length));
    if (entry.isFile()) found.push(await readFile(path, 'utf8'));
  }
  return found;
}

function mkfifo(path: string): void {
  const made = spawnSync('mkfifo', [path], { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`mkfifo: ${made.stderr}`);
}

describe.skipIf(!gcc)('a build racing the node in its share', () => {
  let outside: string;
  let share: string;
  let before: Record<string, string>;

  beforeAll(async () => {
    outside = join(dir, 'host');
    await mkdir(join(outside, 'deep'), { recursive: true });
    await writeFile(join(outside, 'host-only-name'), SECRET, { mode: 0o600 });
    await writeFile(join(outside, 'deep', 'host-only-deep'), SECRET, { mode: 0o640 });
    await writeFile(join(outside, 'big'), Buffer.alloc(BIG, 'h'));
    before = await inventory(outside);
    share = join(dir, 'share');
    await mkdir(join(share, 'd', 'sub'), { recursive: true });
    await writeFile(join(share, 'd', 'a.txt'), 'share a');
    await writeFile(join(share, 'd', 'sub', 'b.txt'), 'share b');
    await writeFile(join(share, 'f.txt'), 'share f');
    mkfifo(join(share, 'pipe'));
    await symlink(outside, join(share, 'l'));
  });

  const unchanged = async () => expect(await inventory(outside)).toEqual(before);
  const nothingOfTheHost = async (copy: string) => {
    const found = await contents(copy);
    expect(found.filter((s) => s.includes('host-only') || s.includes(SECRET) || s.endsWith('/big'))).toEqual([]);
  };

  it('saves, syncs out, counts and gives away the share: nothing of the host is read, changed or opened', async () => {
    const folders = await race(share, 'd', 'l');
    const pipe = await race(share, 'f.txt', 'pipe', true);
    try {
      for (let i = 0; i < ROUNDS; i++) {
        const saved = join(dir, `saved-${i}`);
        await extractArchive(archiveStream(share, selectFiles(share, { include: [], noIgnore: true })), saved);
        await nothingOfTheHost(saved);

        const synced = join(dir, `synced-${i}`);
        const [near, far] = duplexPair();
        const skipped: string[] = [];
        const received = receiveFolder(far, { root: synced, onSkipped: (path) => skipped.push(path) });
        await sendFolder(near, { root: share, rules: { include: [], noIgnore: true }, watch: false, final: true });
        await received;
        await nothingOfTheHost(synced);
        for (const path of skipped) expect(['pipe', 'f.txt']).toContain(path);

        // The share holds a few bytes; the host folder a MiB.
        expect(await new DiskCount(share).step()).toBeLessThan(BIG);
        if (process.getuid?.() === 0) await chownTree(share, 4321, 4321);
        await Promise.all([rm(saved, { recursive: true }), rm(synced, { recursive: true })]);
      }
    } finally {
      const swapped = await folders.stop();
      const probed = await pipe.stop();
      expect(swapped.swaps).toBeGreaterThan(0);
      expect(probed.swaps).toBeGreaterThan(0);
      // Never held open for reading: nothing waited on it.
      expect(probed.held).toBe(0);
    }
    await unchanged();
    // The folder is at one of the two names, the link at the other.
    const folder = (await lstat(join(share, 'd'))).isDirectory() ? 'd' : 'l';
    if (process.getuid?.() === 0) expect((await lstat(join(share, folder, 'a.txt'))).uid).toBe(4321);
  });

  it('restores, syncs in, replaces folders and removes the tree: nothing of the host is written or removed', async () => {
    const restore = join(dir, 'restore-source');
    await mkdir(join(restore, 'd'), { recursive: true });
    await mkdir(join(restore, 'l'), { recursive: true });
    await writeFile(join(restore, 'd', 'x.txt'), 'restored');
    await writeFile(join(restore, 'l', 'x.txt'), 'restored');
    const archive = async () => {
      const chunks: Buffer[] = [];
      for await (const c of archiveStream(restore, selectFiles(restore, { include: [], noIgnore: true }))) chunks.push(c as Buffer);
      return Buffer.concat(chunks);
    };
    const restored = await archive();
    // A sync that puts files into both names, then a file where the folder `d` is.
    const incoming = join(dir, 'incoming');
    await mkdir(join(incoming, 'd'), { recursive: true });
    await mkdir(join(incoming, 'l'), { recursive: true });
    await writeFile(join(incoming, 'd', 'y.txt'), 'synced');
    await writeFile(join(incoming, 'l', 'y.txt'), 'synced');
    const replacing = join(dir, 'replacing');
    await mkdir(replacing);
    await writeFile(join(replacing, 'd'), 'a file where a folder was');

    const victim = join(dir, 'victim');
    const lost: string[] = [];
    /** A live racer may win (a folder it keeps swapping is not removed): the operation fails, safely. */
    const racing = async (work: Promise<unknown>) => {
      try {
        await work;
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code ?? /\b(E[A-Z]+):/.exec((error as Error).message)?.[1];
        expect(['ENOTEMPTY', 'EISDIR', 'ENOTDIR', 'ELOOP', 'EEXIST', 'ENOENT']).toContain(code);
        lost.push(code!);
      }
    };
    for (let i = 0; i < ROUNDS; i++) {
      // The link comes last and the racer after it: these writes stay in the share.
      await mkdir(join(victim, 'd', 'sub'), { recursive: true });
      await writeFile(join(victim, 'd', 'sub', 'a.txt'), 'share a');
      await symlink(outside, join(victim, 'l'));
      const racer = await race(victim, 'd', 'l');
      try {
        await racing(extractArchive(Readable.from([restored]), victim));
        for (const source of [incoming, replacing]) {
          const [near, far] = duplexPair();
          const received = receiveFolder(far, { root: victim }).catch((error: Error) => {
            far.destroy();
            throw error;
          });
          const sent = sendFolder(near, { root: source, rules: { include: [], noIgnore: true }, watch: false, final: true });
          // The sender fails only when the receiver did.
          await Promise.all([racing(received), sent.catch(() => undefined)]);
        }
        await racing(removeTree(victim));
      } finally {
        expect((await racer.stop()).swaps).toBeGreaterThan(0);
      }
      // Once nothing changes it any more (its container removed), the tree goes whole.
      await removeTree(victim);
      await expect(lstat(victim)).rejects.toThrow(/ENOENT/);
    }
    if (lost.length)
      console.info(`beneath-race: the racer won ${lost.length} time(s) (${[...new Set(lost)].join(', ')}); each failed safely`);
    await unchanged();
  });
});
