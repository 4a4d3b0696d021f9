// The disk count of one environment's folder (its shares), as its node samples it
// (docs/environments.md, "Usage"). Each sample looks at a bounded number of entries, so a share of
// millions of files never stalls sampling; a count that needs more goes on where it stopped at the
// next sample, so no file escapes it (a command making many empty files before a big one is counted
// in full a few samples later). The environment changes its folder meanwhile: folders are opened
// beneath it one name at a time, never through a link (src/dataplane/beneath.ts), and files are
// only looked at, never opened. Between samples it holds the folders on the way to the one it
// reads (two descriptors each).
import type { Dir } from 'node:fs';
import { type FileHandle, lstat, opendir } from 'node:fs/promises';
import { at, fdPath, openFolder } from '../dataplane/beneath';

/** What a folder costs besides its files: a block, as `du` counts it. */
export const FOLDER_BYTES = 4096;
const DEFAULT_ENTRIES = 100_000;

/** Entries one sample looks at. BERTH_DISK_COUNT_ENTRIES lowers it: internal, for tests. */
export function entriesPerSample(): number {
  const n = Number(process.env.BERTH_DISK_COUNT_ENTRIES);
  return Number.isSafeInteger(n) && n > 0 ? n : DEFAULT_ENTRIES;
}

/** A folder being read: its descriptor (children are named through it) and its listing. */
interface Reading {
  folder: FileHandle;
  dir: Dir;
}

/**
 * Regular files by size (never following links) plus FOLDER_BYTES per folder, counted over as
 * many samples as the folder needs. A folder that vanishes meanwhile counts as empty.
 */
export class DiskCount {
  /** The folders being read, the root first: the last is read, the others wait for it. */
  private reading: Reading[] = [];
  private passing = false;
  /** This pass's bytes so far. */
  private bytes = 0;
  /** The last complete pass's bytes. */
  private last = 0;

  constructor(private readonly root: string) {}

  /**
   * Looks at up to `budget` more entries; answers the bytes as known now: the last complete
   * count, or this pass's so far when that is already more (a pass ending in this sample answers
   * its own count).
   */
  async step(budget = entriesPerSample()): Promise<number> {
    let left = budget;
    if (!this.passing) {
      this.passing = true;
      this.bytes = 0;
      left--;
      await this.enter(this.root);
    }
    while (left > 0) {
      const top = this.reading.at(-1);
      if (!top) {
        this.passing = false;
        this.last = this.bytes;
        return this.last;
      }
      const entry = await top.dir.read().catch(() => null);
      if (!entry) {
        this.reading.pop();
        await leave(top);
        continue;
      }
      left--;
      const here = at(top.folder.fd, entry.name);
      if (entry.isDirectory()) {
        this.bytes += FOLDER_BYTES;
        await this.enter(here);
      } else if (entry.isFile()) {
        const st = await lstat(here).catch(() => null);
        if (st?.isFile()) this.bytes += st.size;
      }
    }
    return Math.max(this.last, this.bytes);
  }

  /** Starts reading the folder at `path`, unless it is gone or no longer a folder. */
  private async enter(path: string): Promise<void> {
    const folder = await openFolder(path).catch(() => null);
    if (!folder) return;
    const dir = await opendir(fdPath(folder.fd)).catch(() => null);
    if (dir) this.reading.push({ folder, dir });
    else await folder.close();
  }

  /** Lets go of the open folders (the environment is gone from this node). */
  close(): void {
    for (const r of this.reading) void leave(r);
    this.reading = [];
    this.passing = false;
  }
}

async function leave({ folder, dir }: Reading): Promise<void> {
  await dir.close().catch(() => undefined);
  await folder.close().catch(() => undefined);
}
