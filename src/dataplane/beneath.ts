// Paths under a share folder that the environment can change while the node works in it: a link
// it plants, or swaps in for a folder mid-operation, must never lead the node (root on its host)
// out of the share. Every folder is opened one name at a time with O_NOFOLLOW, each step through
// the descriptor of the one before (/proc/self/fd/N/name), so no link anywhere on the way is
// followed; files are then named through their folder's descriptor. A descriptor keeps naming the
// folder it opened even if the environment renames it, and the environment cannot move a folder
// out of its share (another mount).
import { closeSync, constants, fchownSync, fstatSync, mkdirSync, openSync, rmSync } from 'node:fs';
import path from 'node:path';

const DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

export class Beneath {
  /** Open folders by their path relative to the root ('' is the root). */
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
    const fd = openSync(root, DIRECTORY);
    const { uid, gid } = fstatSync(fd);
    return new Beneath(fd, uid === process.getuid?.() ? undefined : { uid, gid });
  }

  /**
   * The folder `rel` ('' for the root) as a path that reaches it through open descriptors. With
   * `make`, missing folders are made, and a file or link standing in the way is removed first.
   * Throws (ELOOP, ENOTDIR, ENOENT) when a name on the way is not a folder and `make` is off.
   */
  folder(rel: string, make = false): string {
    return `/proc/self/fd/${this.fd(rel === '.' ? '' : rel, make)}`;
  }

  /** The file `rel` named through its folder's descriptor (its last name is not followed by open with O_NOFOLLOW). */
  file(rel: string, make = false): string {
    return `${this.folder(path.posix.dirname(rel), make)}/${path.posix.basename(rel)}`;
  }

  private fd(rel: string, make: boolean): number {
    const known = this.folders.get(rel);
    if (known !== undefined) return known;
    const parent = this.fd(path.posix.dirname(rel) === '.' ? '' : path.posix.dirname(rel), make);
    const at = `/proc/self/fd/${parent}/${path.posix.basename(rel)}`;
    let fd: number;
    try {
      fd = openSync(at, DIRECTORY);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (!make || (code !== 'ENOENT' && code !== 'ELOOP' && code !== 'ENOTDIR')) throw error;
      if (code !== 'ENOENT') rmSync(at, { force: true });
      mkdirSync(at);
      fd = openSync(at, DIRECTORY);
      if (this.owner) fchownSync(fd, this.owner.uid, this.owner.gid);
    }
    this.folders.set(rel, fd);
    return fd;
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
