import { randomUUID } from 'node:crypto';
import type { Actor } from '../../app/context';
import type { Clock } from '../../platform/clock';
import { type Events, topics } from '../../platform/events';

/** The topic of every change that makes a remembered credential or address lock stale. */

/** What is remembered of a credential that authenticated: enough to authenticate it again. */
export interface CachedCredential {
  actor: Actor;
  /** ms since the epoch; null: never expires. Checked on every use, so expiry needs no message. */
  expires: number | null;
  /** When `lastUsed` was last written (ms), so it is written at most once a minute. */
  lastUsed: number | null;
}

/** What makes entries stale, as published on topics.credentialCache() to every instance. */
export interface CredentialChange {
  /** Credentials revoked, expired early or removed. */
  credentials?: string[];
  /** A sandbox removed: every credential of it. */
  sandbox?: string;
  /** An address locked after too many failures (429), until this time (ms). */
  blocked?: { address: string; until: number };
}

const MAX_ENTRIES = 10_000;
/** How often open streams are checked for a credential that expired meanwhile. */
const EXPIRY_SWEEP_MS = 1_000;

/** An open stream (a WebSocket, an SSE response, a relay) that lives as long as its credential. */
interface Hold {
  actor: Actor;
  end(reason: string): void;
}
/** How long a publisher waits to hear its own change back from PostgreSQL (see `publish`). */
const ECHO_MS = 2_000;

/**
 * Remembers credentials that authenticated, by their secret's hash, so an authenticated request
 * needs no credential statement. Every change that can make an entry wrong (revocation, removal,
 * an address lock) is applied locally at once and published on the event bus (LISTEN/NOTIFY
 * across instances on PostgreSQL); expiry is checked on every use. While the bus is not
 * receiving, nothing is served from memory. An entry is only stored when no change arrived
 * between the start of the read that found it and its storing, so a read racing a revocation
 * cannot put the revoked credential back.
 */
export class CredentialCache {
  private readonly entries = new Map<string, CachedCredential>();
  /** Addresses locked (429) until a time, ms: the lock is checked on every request, cached or not. */
  private readonly blocked = new Map<string, number>();
  private readonly echoes = new Map<string, () => void>();
  private version = 0;
  private readonly stop: () => void;
  private readonly holds = new Set<Hold>();
  /** Holds whose credential expires: the sweep runs while there is one (a count, so a release is O(1)). */
  private expiring = 0;
  private sweep: NodeJS.Timeout | undefined;

  constructor(
    private readonly events: Events,
    private readonly clock: Clock,
  ) {
    this.stop = events.listen(topics.credentialCache(), (payload) => this.receive(payload));
  }

  /**
   * Ties an open stream to its credential: `end` is called once, when the credential is revoked
   * or its sandbox removed (on any instance, as soon as the change is heard) or it expires (within
   * a second). Returns the release to call when the stream ends by itself.
   */
  hold(actor: Actor, end: (reason: string) => void): () => void {
    const hold: Hold = { actor, end };
    this.holds.add(hold);
    if (actor.expires !== undefined && this.expiring++ === 0) {
      this.sweep = setInterval(() => this.endExpired(), EXPIRY_SWEEP_MS);
      this.sweep.unref();
    }
    return () => this.release(hold);
  }

  private release(hold: Hold): void {
    if (!this.holds.delete(hold)) return;
    if (hold.actor.expires !== undefined && --this.expiring === 0) {
      clearInterval(this.sweep);
      this.sweep = undefined;
    }
  }

  private endHolds(match: (actor: Actor) => boolean, reason: string): void {
    for (const hold of this.holds) {
      if (!match(hold.actor)) continue;
      this.release(hold);
      hold.end(reason);
    }
  }

  private endExpired(): void {
    const now = this.clock.now().getTime();
    this.endHolds((actor) => actor.expires !== undefined && actor.expires <= now, 'this credential has expired');
  }

  /** A credential remembered and still usable now, or undefined (then the database decides). */
  get(hash: string, now: Date): CachedCredential | undefined {
    if (!this.events.receiving()) {
      if (this.entries.size) this.clear();
      return undefined;
    }
    const entry = this.entries.get(hash);
    if (entry?.expires !== null && entry !== undefined && entry.expires <= now.getTime()) {
      this.entries.delete(hash);
      return undefined;
    }
    return entry;
  }

  /** The version to hand back to `set`: taken before reading the credential from the database. */
  snapshot(): number {
    return this.version;
  }

  /** Remembers a credential read at `version`, unless a change arrived since. */
  set(hash: string, entry: CachedCredential, version: number): void {
    if (version !== this.version || !this.events.receiving()) return;
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value as string);
    this.entries.set(hash, entry);
  }

  /** Until when (ms) the address is locked, if it is locked at `now`. */
  blockedUntil(address: string, now: Date): number | undefined {
    if (this.blocked.size === 0) return undefined;
    const until = this.blocked.get(address);
    if (until === undefined) return undefined;
    if (until > now.getTime()) return until;
    this.blocked.delete(address);
    return undefined;
  }

  /** A lock read from the database (made before this start, or by an instance not heard). */
  noteBlocked(address: string, until: number): void {
    this.apply({ blocked: { address, until } });
  }

  /**
   * Applies a change here at once, then publishes it to every instance. On a shared PostgreSQL
   * it waits (at most 2 s) until this instance hears its own notification back: PostgreSQL sends
   * a notification to every listening session at once, so the others have it too by then.
   */
  async publish(change: CredentialChange): Promise<void> {
    this.apply(change);
    if (!this.events.shared) return this.events.publish(topics.credentialCache(), { ...change });
    const nonce = randomUUID();
    let timer: NodeJS.Timeout | undefined;
    const echoed = new Promise<void>((resolve) => {
      this.echoes.set(nonce, resolve);
      timer = setTimeout(() => {
        // Not heard back: the bus may be failing; forget everything rather than trust it.
        this.clear();
        resolve();
      }, ECHO_MS);
      timer.unref();
    });
    try {
      await this.events.publish(topics.credentialCache(), { ...change, nonce });
      await echoed;
    } finally {
      clearTimeout(timer);
      this.echoes.delete(nonce);
    }
  }

  close(): void {
    this.stop();
    this.clear();
    this.holds.clear();
    this.expiring = 0;
    clearInterval(this.sweep);
    this.sweep = undefined;
  }

  private clear(): void {
    this.version++;
    this.entries.clear();
  }

  private receive(payload: CredentialChange & { nonce?: string }): void {
    this.apply(payload);
    const nonce = payload.nonce;
    if (typeof nonce === 'string') this.echoes.get(nonce)?.();
  }

  private apply(change: CredentialChange): void {
    if (change.blocked) {
      const { address, until } = change.blocked;
      if (!(until <= (this.blocked.get(address) ?? 0))) this.blocked.set(address, until);
      if (this.blocked.size > MAX_ENTRIES) {
        const now = Date.now();
        for (const [a, u] of this.blocked) if (u <= now) this.blocked.delete(a);
      }
    }
    if (!change.credentials?.length && !change.sandbox) return;
    this.version++;
    const ids = new Set(change.credentials ?? []);
    const stale = (actor: Actor) => ids.has(actor.credentialId) || (change.sandbox !== undefined && actor.sandboxId === change.sandbox);
    for (const [hash, entry] of this.entries) if (stale(entry.actor)) this.entries.delete(hash);
    this.endHolds(stale, change.sandbox ? 'this sandbox was removed' : 'this credential was revoked');
  }
}
