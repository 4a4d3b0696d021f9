// Trees the environment can change while the node works in them (share folders: a build, maybe
// root inside its container, swaps files, links, FIFOs and folders at any time): a link it plants
// must never lead the node (root on its host) out of the tree, nor a special file block it. Every
// folder is opened one name at a time with O_NOFOLLOW, each step through the descriptor of the one
// before (/proc/self/fd/N/name), so no link anywhere on the way is followed; files, owners and
// removals then go through their folder's descriptor, and only regular files are ever opened
// (src/kernel/no-follow.ts). A descriptor keeps naming the folder it opened even if the
// environment renames it, and the environment cannot move a folder out of its share (another mount).
import { closeSync, constants, type Dir, fchownSync, fstatSync, mkdirSync, openSync, unlinkSync } from 'node:fs';
import { type FileHandle, lchown, opendir, readdir, rename, rmdir, unlink } from 'node:fs/promises';
import path from 'node:path';
import { at, FOLDER_FLAGS, isGone, openFolder } from '../kernel/no-follow';

export { at, isGone, type Kind, kindOf, openFolder, openRegular, openRegularSync } from '../kernel/no-follow';

/** A descriptor's folder as a path the kernel resolves through the descriptor. */
export function fdPath(fd: number): string {
  return `/proc/self/fd/${fd}`;
}

export class Beneath {
  /** Open folders by their path relative to the root ('' is the root): those on the way to the last one asked. */
  private readonly folders = new Map<string, number>();

  private constructor(
    rootFd: number,
    /** Whom folders made here belong to: the share's owner (the image's user), when it is not this process. */
    readonly owner?: { uid: number; gid: number },
  ) {
    this.folders.set('', rootFd);
  }

  /** The share folder itself is the node's own path, trusted; it is made when missing. */
  static open(root: string): Beneath {
    mkdirSync(root, { recursive: true });
    const fd = openSync(root, FOLDER_FLAGS);
    const { uid, gid } = fstatSync(fd);
    return new Beneath(fd, uid === process.getuid?.() ? undefined : { uid, gid });
  }

  /**
   * The folder `rel` ('' for the root) as a path that reaches it through open descriptors. With
   * `make`, missing folders are made, and a file or link standing in the way is removed first.
   * Throws (ELOOP, ENOTDIR, ENOENT) when a name on the way is not a folder and `make` is off.
   */
  folder(rel: string, make = false): string {
    const name = rel === '.' ? '' : rel;
    // Only the folders on the way stay open: a walk in path order reuses them, and a tree of many
    // folders never holds a descriptor for each.
    for (const [known, fd] of this.folders) {
      if (known !== '' && known !== name && !name.startsWith(`${known}/`)) {
        closeSync(fd);
        this.folders.delete(known);
      }
    }
    return fdPath(this.fd(name, make));
  }

  /** The file `rel` named through its folder's descriptor (its last name is not followed by open with O_NOFOLLOW). */
  file(rel: string, make = false): string {
    return `${this.folder(path.posix.dirname(rel), make)}/${path.posix.basename(rel)}`;
  }

  private fd(rel: string, make: boolean): number {
    const known = this.folders.get(rel);
    if (known !== undefined) return known;
    const parent = this.fd(path.posix.dirname(rel) === '.' ? '' : path.posix.dirname(rel), make);
    const here = at(parent, path.posix.basename(rel));
    let made = false;
    for (let pass = 1; ; pass++) {
      try {
        const fd = openSync(here, FOLDER_FLAGS);
        if (made && this.owner) fchownSync(fd, this.owner.uid, this.owner.gid);
        this.folders.set(rel, fd);
        return fd;
      } catch (error) {
        if (!make || !isGone(error) || pass >= REMOVE_PASSES) throw error;
        // What stands in the way goes (a link: itself, never its target), then a folder is made;
        // whoever changes the name meanwhile makes this go round again.
        try {
          if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
            mkdirSync(here);
            made = true;
          } else {
            unlinkSync(here);
          }
        } catch (again) {
          const code = (again as NodeJS.ErrnoException).code;
          if (code !== 'EEXIST' && code !== 'EISDIR' && code !== 'ENOENT') throw again;
        }
      }
    }
  }

  /** Forgets `rel` and every folder under it (after it was removed or replaced). */
  forget(rel: string): void {
    for (const [name, fd] of this.folders) {
      if (name !== '' && (name === rel || name.startsWith(`${rel}/`))) {
        closeSync(fd);
        this.folders.delete(name);
      }
    }
  }

  close(): void {
    for (const fd of this.folders.values()) closeSync(fd);
    this.folders.clear();
  }
}

/**
 * Gives the folder `dir` and everything in it to uid:gid: folders by their descriptor, anything
 * else by its name in its folder's descriptor without following it (a link changes owner, never
 * its target). A folder swapped for something else on the way is given as what it is now.
 */
export async function chownTree(dir: string, uid: number, gid: number): Promise<void> {
  const folder = await openFolder(dir);
  if (!folder) throw new Error(`${dir} is not a folder`);
  try {
    await chownFolder(folder, uid, gid);
  } finally {
    await folder.close();
  }
}

async function chownFolder(folder: FileHandle, uid: number, gid: number): Promise<void> {
  await folder.chown(uid, gid);
  // Streamed: a folder of a million names is never one array.
  const dir = await opendir(fdPath(folder.fd));
  try {
    for await (const entry of dir) {
      const here = at(folder.fd, entry.name);
      const child = entry.isDirectory() ? await openFolder(here) : null;
      if (child) {
        try {
          await chownFolder(child, uid, gid);
        } finally {
          await child.close();
        }
      } else {
        await lchown(here, uid, gid).catch((error: unknown) => {
          if (!isGone(error)) throw error;
        });
      }
    }
  } finally {
    await closeDir(dir);
  }
}

/** How many times a folder someone keeps filling is emptied before its removal gives up. */
const REMOVE_PASSES = 8;

/**
 * Removes what is at `target` (its last name is never followed: a link is removed, not its
 * target), a folder with everything in it. Each folder is opened beneath the one before and
 * emptied through its descriptor, so a folder swapped for a link meanwhile leads nowhere. A
 * folder that fills again while it is emptied is emptied again, a few times, then the removal
 * fails. Nothing there is no error.
 */
export async function removeTree(target: string): Promise<void> {
  for (let pass = 1; ; pass++) {
    const folder = await openFolder(target);
    if (!folder) {
      try {
        await unlink(target);
        return;
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') return;
        // It became a folder meanwhile.
        if (code !== 'EISDIR' || pass >= REMOVE_PASSES) throw error;
        continue;
      }
    }
    try {
      for (const name of await readdir(fdPath(folder.fd))) await removeTree(at(folder.fd, name));
    } finally {
      await folder.close();
    }
    try {
      await rmdir(target);
      return;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if ((code !== 'ENOTEMPTY' && code !== 'EEXIST' && code !== 'ENOTDIR') || pass >= REMOVE_PASSES) throw error;
    }
  }
}

/**
 * Renames `tmp`, a new file in the folder at `folder` (a descriptor's path), to `name` there: what
 * stands at the name is replaced without being opened (a link, a FIFO), a folder removed first
 * (removeTree). `tmp` is removed when the rename fails.
 */
export async function replace(tmp: string, folder: string, name: string): Promise<void> {
  const target = `${folder}/${name}`;
  for (let pass = 1; ; pass++) {
    try {
      await rename(tmp, target);
      return;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if ((code !== 'EISDIR' && code !== 'ENOTEMPTY' && code !== 'EEXIST') || pass >= REMOVE_PASSES) {
        await unlink(tmp).catch(() => undefined);
        throw error;
      }
      await removeTree(target);
    }
  }
}

async function closeDir(dir: Dir): Promise<void> {
  await dir.close().catch(() => undefined);
}

/** O_CREAT|O_EXCL never opens what is there: a new file, never through a link. */
export const NEW_FILE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
