import type { ServerResponse } from 'node:http';
import type { Deps } from '../context';
import { pendingMigrations } from '../db/migrate';
import { sendError, sendJson } from './respond';

/** A readiness check that takes longer than this counts as failed (a load balancer is waiting). */
const CHECK_TIMEOUT_MS = 3_000;

function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${CHECK_TIMEOUT_MS / 1000}s`)), CHECK_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** GET /healthz: the process is alive and answering. It checks nothing else, so a restart is never triggered by a slow database. */
export function sendLiveness(res: ServerResponse): void {
  sendJson(res, 200, { status: 'ok' });
}

/**
 * GET /readyz: whether this instance can serve requests: the database answers and every
 * migration of this version is applied; 503 with the reason otherwise (also while stopping).
 */
export async function sendReadiness(res: ServerResponse, deps: Deps, stopping: boolean): Promise<void> {
  if (stopping) return sendError(res, 503, 'not ready: this instance is stopping', 'not_ready');
  try {
    await within(deps.db.pool.query('SELECT 1'), 'the database');
  } catch (err) {
    return sendError(res, 503, `not ready: the database is unreachable (${(err as Error).message})`, 'not_ready');
  }
  let pending: string[];
  try {
    pending = await within(pendingMigrations(deps.db.pool), 'the migration history');
  } catch (err) {
    return sendError(res, 503, `not ready: cannot read the migration history (${(err as Error).message})`, 'not_ready');
  }
  if (pending.length) return sendError(res, 503, `not ready: migrations not applied: ${pending.join(', ')}`, 'not_ready');
  sendJson(res, 200, { status: 'ready', checks: { database: 'ok', migrations: 'ok' } });
}
