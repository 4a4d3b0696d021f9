// The disk count of one environment's folder (its shares), as its node samples it
// (docs/environments.md, "Usage"). Each sample looks at a bounded number of entries, so a share of
// millions of files never stalls sampling; a count that needs more goes on where it stopped at the
// next sample, so no file escapes it (a command making many empty files before a big one is counted
// in full a few samples later). Between samples it holds one open folder and the paths of the
// folders still to read: each of those was charged a block, so a disk limit bounds them too.
import type { Dir } from 'node:fs';
import { lstat, opendir } from 'node:fs/promises';
import { join } from 'node:path';

/** What a folder costs besides its files: a block, as `du` counts it. */
export const FOLDER_BYTES = 4096;
const DEFAULT_ENTRIES = 100_000;

/** Entries one sample looks at. BERTH_DISK_COUNT_ENTRIES lowers it: internal, for tests. */
export function entriesPerSample(): number {
  const n = Number(process.env.BERTH_DISK_COUNT_ENTRIES);
  return Number.isSafeInteger(n) && n > 0 ? n : DEFAULT_ENTRIES;
}

/**
 * Regular files by size (never following links) plus FOLDER_BYTES per folder, counted over as
 * many samples as the folder needs. A folder that vanishes meanwhile counts as empty.
 */
export class DiskCount {
  /** Folders found and not yet read, in this pass. */
  private pending: string[] = [];
  private reading: { dir: Dir; path: string } | undefined;
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
    if (!this.passing) {
      this.passing = true;
      this.pending = [this.root];
      this.bytes = 0;
    }
    for (let left = budget; left > 0; ) {
      if (!this.reading) {
        const path = this.pending.pop();
        if (path === undefined) {
          this.passing = false;
          this.last = this.bytes;
          return this.last;
        }
        left--;
        const dir = await opendir(path).catch(() => undefined);
        if (dir) this.reading = { dir, path };
        continue;
      }
      const { dir, path } = this.reading;
      const entry = await dir.read().catch(() => null);
      if (!entry) {
        this.reading = undefined;
        await dir.close().catch(() => undefined);
        continue;
      }
      left--;
      const child = join(path, entry.name);
      if (entry.isDirectory()) {
        this.bytes += FOLDER_BYTES;
        this.pending.push(child);
      } else if (entry.isFile()) {
        this.bytes += (await lstat(child).catch(() => null))?.size ?? 0;
      }
    }
    return Math.max(this.last, this.bytes);
  }

  /** Lets go of the open folder (the environment is gone from this node). */
  close(): void {
    this.reading?.dir.close().catch(() => undefined);
    this.reading = undefined;
    this.pending = [];
    this.passing = false;
  }
}
