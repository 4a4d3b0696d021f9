import type { Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import { environmentFromPayload } from '../../kernel/json-columns';
import { topics } from '../../platform/events';

export interface FeedEvent {
  seq: bigint;
  environmentId: string;
  environment: Environment;
}

type Listener = (events: FeedEvent[]) => void;

/**
 * One reader of an organization's environment event log per instance, however many subscribers:
 * a notification costs one query, and every subscriber gets the same rows in sequence order.
 */
class OrgFeed {
  private last = 0n;
  private readonly listeners = new Set<Listener>();
  private reading: Promise<void> | undefined;
  private again = false;
  private readonly wakeups: AsyncIterator<unknown>;
  readonly ready: Promise<void>;

  constructor(
    private readonly deps: Deps,
    private readonly orgId: string,
    private readonly onEmpty: () => void,
  ) {
    this.wakeups = deps.events.subscribe(topics.environments(orgId))[Symbol.asyncIterator]();
    const first = this.wakeups.next();
    this.ready = deps.prisma.environmentEvent.aggregate({ _max: { seq: true }, where: { orgId } }).then((r) => {
      this.last = r._max.seq ?? 0n;
      void this.listen(first);
    });
  }

  private async listen(next: Promise<IteratorResult<unknown>>): Promise<void> {
    while (!(await next).done) {
      next = this.wakeups.next();
      void this.read();
    }
  }

  /** Reads what was appended since the last read; a wake-up during a read reads again after it. */
  private read(): Promise<void> {
    if (this.reading) {
      this.again = true;
      return this.reading;
    }
    this.reading = (async () => {
      do {
        this.again = false;
        const rows = await this.deps.prisma.environmentEvent.findMany({
          where: { orgId: this.orgId, seq: { gt: this.last } },
          orderBy: { seq: 'asc' },
          take: 1000,
          select: { seq: true, environmentId: true, payload: true },
        });
        if (rows.length === 0) continue;
        this.last = rows.at(-1)!.seq;
        if (rows.length === 1000) this.again = true;
        const events = rows.map(({ seq, environmentId, payload }) => ({
          seq,
          environmentId,
          environment: environmentFromPayload(payload),
        }));
        for (const listener of this.listeners) listener(events);
      } while (this.again);
    })()
      .catch(() => undefined)
      .finally(() => (this.reading = undefined));
    return this.reading;
  }

  async join(listener: Listener): Promise<() => void> {
    await this.ready;
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) {
        void this.wakeups.return?.();
        this.onEmpty();
      }
    };
  }
}

const feeds = new WeakMap<Deps, Map<string, OrgFeed>>();

/**
 * Listens to every environment change of the organization committed from now on, in commit
 * order, once each; resolves once listening (anything committed before is in the database).
 * Returns the function that stops listening.
 */
export function joinEnvironmentFeed(deps: Deps, orgId: string, listener: Listener): Promise<() => void> {
  const orgs = feeds.get(deps) ?? new Map<string, OrgFeed>();
  feeds.set(deps, orgs);
  let feed = orgs.get(orgId);
  if (!feed) {
    feed = new OrgFeed(deps, orgId, () => orgs.delete(orgId));
    orgs.set(orgId, feed);
  }
  return feed.join(listener);
}
