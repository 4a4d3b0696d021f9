// The paging rule of every list (environments, artifacts, snapshots), REST and GraphQL alike:
// newest first, keyset pagination on (created, id); a page holds 1-500 items, 50 by default;
// forward only. A cursor is base64url of `[created ms, id]` and belongs to one list (its ids'
// prefix), so a cursor of another list, or a made-up one, is refused, never a 500.
import { ValidationError } from './errors';
import { isId } from './names';

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 500;
const MAX_CURSOR_LENGTH = 200;

/** GraphQL's connection arguments (REST's `limit` and `cursor` are `first` and `after`). */
export interface PageArgs {
  first?: number | null;
  after?: string | null;
  last?: number | null;
  before?: string | null;
}

interface Keyed {
  created: Date;
  id: string;
}

export interface Page<T> {
  items: T[];
  hasNextPage: boolean;
  /** Cursor of the last item when there is a next page (REST's `next`). */
  next: string | null;
  cursorOf(item: T): string;
}

export function encodeCursor(item: Keyed): string {
  return Buffer.from(JSON.stringify([item.created.getTime(), item.id])).toString('base64url');
}

function decodeCursor(cursor: string, idPrefix: string): Keyed {
  if (cursor.length <= MAX_CURSOR_LENGTH && /^[A-Za-z0-9_-]+$/.test(cursor)) {
    try {
      const decoded: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
      if (Array.isArray(decoded) && decoded.length === 2) {
        const [ms, id] = decoded as [unknown, unknown];
        if (Number.isSafeInteger(ms) && typeof id === 'string' && isId(id, idPrefix)) return { created: new Date(ms as number), id };
      }
    } catch {
      // not JSON: refused below
    }
  }
  throw new ValidationError('after: not a cursor of this list (use the `next` or `endCursor` of the previous page)', 'after');
}

/** The page size asked for, by the one rule. */
export function pageSize(first: number | null | undefined): number {
  const size = first ?? DEFAULT_PAGE_SIZE;
  if (!Number.isSafeInteger(size) || size < 1 || size > MAX_PAGE_SIZE) {
    throw new ValidationError(`first: must be between 1 and ${MAX_PAGE_SIZE} (got ${size})`, 'first');
  }
  return size;
}

/**
 * Prisma arguments of the page `args` asks for, over rows whose ids start with `idPrefix`: the
 * `where` to add to the list's own filter, the order and how many rows to fetch (one more than
 * the page, to know whether another follows).
 */
export function pageQuery(args: PageArgs, idPrefix: string) {
  if (args.last !== undefined && args.last !== null) throw new ValidationError('last: only forward paging (first, after)', 'last');
  if (args.before !== undefined && args.before !== null) throw new ValidationError('before: only forward paging (first, after)', 'before');
  const size = pageSize(args.first);
  const cursor = args.after === undefined || args.after === null ? undefined : decodeCursor(args.after, idPrefix);
  return {
    size,
    where: cursor ? { OR: [{ created: { lt: cursor.created } }, { created: cursor.created, id: { lt: cursor.id } }] } : {},
    orderBy: [{ created: 'desc' as const }, { id: 'desc' as const }],
    take: size + 1,
  };
}

/** The page out of the rows fetched with pageQuery. */
export function pageOf<T extends Keyed>(rows: T[], size: number): Page<T> {
  const items = rows.slice(0, size);
  const hasNextPage = rows.length > size;
  return { items, hasNextPage, next: hasNextPage ? encodeCursor(items.at(-1)!) : null, cursorOf: encodeCursor };
}
