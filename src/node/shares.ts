// An environment's shares restored from its snapshot when it starts and saved when it ends
// (docs/snapshots.md), written once for every node. Where the archives come from and go is the
// caller's: `berth node` (the built-in node too) speaks the node HTTP calls.
import { lstat } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { shareDir } from '../dataplane/layout';
import { type SyncRules, selectFiles } from '../kernel/sync-rules';
import { archiveStream, extractArchive } from '../protocol/snapshot-archive';

/** A saved share to restore: its name and how to open its archive. */
export interface SavedShare {
  share: string;
  open(): Promise<Readable>;
}

/**
 * Extracts each saved share into its folder under `root`: a share the template no longer has is
 * restored where its name would put it. Returns how many files were written.
 */
export async function restoreShares(
  root: string,
  shares: readonly { name: string; envPath: string }[],
  saved: readonly SavedShare[],
): Promise<number> {
  let files = 0;
  for (const { share, open } of saved) {
    const envPath = shares.find((s) => s.name === share)?.envPath ?? `/${share}`;
    files += (await extractArchive(await open(), shareDir(root, envPath))).files;
  }
  return files;
}

/**
 * Hands `save` the archive of each share not `saved` yet whose folder exists under `root`, with its
 * sync rules. Special files (FIFOs, sockets, devices) are never opened: each is told to `skipped`.
 */
export async function saveShares(
  root: string,
  shares: readonly { name: string; envPath: string; rules: SyncRules }[],
  saved: readonly string[],
  save: (share: string, archive: Readable) => Promise<void>,
  skipped: (share: string, path: string) => void,
): Promise<void> {
  for (const share of shares) {
    const dir = shareDir(root, share.envPath);
    if (saved.includes(share.name) || !(await isFolder(dir))) continue;
    const files = selectFiles(dir, share.rules, { special: (path) => skipped(share.name, path) });
    await save(share.name, archiveStream(dir, files));
  }
}

/** The share folder is the node's own (the environment sees it as a mount point): a link there is no share. */
async function isFolder(path: string): Promise<boolean> {
  return (await lstat(path).catch(() => null))?.isDirectory() ?? false;
}
