import type { Page, PageArgs } from '../paging';

/** A page of a list (src/kernel/paging.ts) as a Relay connection. */
export function connectionOf<T>(page: Page<T>, args: PageArgs) {
  const edges = page.items.map((node) => ({ node, cursor: page.cursorOf(node) }));
  return {
    edges,
    pageInfo: {
      hasNextPage: page.hasNextPage,
      hasPreviousPage: Boolean(args.after),
      startCursor: edges[0]?.cursor ?? null,
      endCursor: edges.at(-1)?.cursor ?? null,
    },
  };
}
