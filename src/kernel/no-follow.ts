// How one name in a folder someone else can change is opened (a share folder, which an
// environment's build changes at any time while its node, often root, works in it): through the
// folder's descriptor (/proc/self/fd/N/name, so the folder is the one opened even if it was renamed
// since), never following a link at the name, and never opening what is neither a folder nor a
// regular file: opening a FIFO blocks until a writer comes, a device runs its driver. A file is
// first opened as a path only (O_PATH: nothing of the file is opened), checked with fstat, and
// only then opened for reading through that descriptor, so what is read is the very file checked.
// The trees' operations built on these are in src/dataplane/beneath.ts; the sync rules' walk
// (sync-rules.ts) uses them directly.
import { closeSync, constants, type Dirent, fstatSync, openSync, type Stats } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';

/** Linux's O_PATH (Node has no constant for it): a descriptor naming a file without opening it. */
const O_PATH = 0o10000000;
/** A folder, never through a link at its name; O_DIRECTORY refuses anything else before opening it. */
export const FOLDER_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const NAME_FLAGS = O_PATH | constants.O_NOFOLLOW;

/** `name` in the folder open as `fd`, resolved through the descriptor rather than the folder's path. */
export function at(fd: number, name: string): string {
  return `/proc/self/fd/${fd}/${name}`;
}

/** What a name is, as the logs say it. */
export type Kind = 'file' | 'folder' | 'link' | 'FIFO' | 'socket' | 'device';

export function kindOf(st: Stats | Dirent): Kind {
  if (st.isFile()) return 'file';
  if (st.isDirectory()) return 'folder';
  if (st.isSymbolicLink()) return 'link';
  if (st.isFIFO()) return 'FIFO';
  if (st.isSocket()) return 'socket';
  return 'device';
}

/** The errors of a name that is gone, or is not what was asked for (a link where a folder was). */
export function isGone(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP';
}

/** The folder at `path` (its last name never followed), or null when it is gone or is no folder. */
export async function openFolder(path: string): Promise<FileHandle | null> {
  try {
    return await open(path, FOLDER_FLAGS);
  } catch (error) {
    if (isGone(error)) return null;
    throw error;
  }
}

/** The regular file at `path` (its last name never followed) open for reading, or null when it is gone or is none. */
export async function openRegular(path: string): Promise<{ handle: FileHandle; stats: Stats } | null> {
  let named: FileHandle;
  try {
    named = await open(path, NAME_FLAGS);
  } catch (error) {
    if (isGone(error)) return null;
    throw error;
  }
  try {
    const stats = await named.stat();
    if (!stats.isFile()) return null;
    return { handle: await open(`/proc/self/fd/${named.fd}`, constants.O_RDONLY), stats };
  } finally {
    await named.close();
  }
}

/** openRegular, for callers that read many small files (a thread-pool round trip costs more than the call). */
export function openRegularSync(path: string): { fd: number; stats: Stats } | null {
  let named: number;
  try {
    named = openSync(path, NAME_FLAGS);
  } catch (error) {
    if (isGone(error)) return null;
    throw error;
  }
  try {
    const stats = fstatSync(named);
    if (!stats.isFile()) return null;
    return { fd: openSync(`/proc/self/fd/${named}`, constants.O_RDONLY), stats };
  } finally {
    closeSync(named);
  }
}
