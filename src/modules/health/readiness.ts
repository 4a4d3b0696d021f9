import type { Deps } from '../../app/context';
import { beforeDeadline } from '../../kernel/deadline';
import { pendingMigrations } from '../../platform/db/migrate';

/** A readiness check that takes longer than this counts as failed (a load balancer is waiting). */
export const CHECK_TIMEOUT_MS = 3_000;

const within = <T>(promise: Promise<T>, what: string): Promise<T> =>
  beforeDeadline(promise, CHECK_TIMEOUT_MS, () => new Error(`${what} did not answer within ${CHECK_TIMEOUT_MS / 1000}s`));

/**
 * Whether this instance can serve: the database answers and every migration of this version is
 * applied; else why not. `reason` is for anyone who asks; `detail` (the driver's own words, which
 * may name hosts and users) only for the log.
 */
export async function readiness(deps: Deps): Promise<{ ready: true } | { ready: false; reason: string; detail?: string }> {
  try {
    await within(deps.db.pool.query('SELECT 1'), 'the database');
  } catch (err) {
    return { ready: false, reason: 'the database is unreachable', detail: (err as Error).message };
  }
  let pending: string[];
  try {
    pending = await within(pendingMigrations(deps.db.pool), 'the migration history');
  } catch (err) {
    return { ready: false, reason: 'cannot read the migration history', detail: (err as Error).message };
  }
  if (pending.length) return { ready: false, reason: `migrations not applied: ${pending.join(', ')}` };
  return { ready: true };
}
