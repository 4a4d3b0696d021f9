import type { ServerResponse } from 'node:http';
import type { Deps, Log } from '../../app/context';
import { readiness } from '../../modules/health';
import { builtinEngine } from '../../modules/nodes';
import { sendError, sendJson } from './respond';

/** GET /healthz: the process is alive and answering. It checks nothing else, so a slow database never gets it restarted. */
export function sendLiveness(res: ServerResponse): void {
  sendJson(res, 200, { status: 'ok' });
}

/**
 * GET /readyz: 200 when this instance can serve requests; 503 with the reason otherwise (also while
 * stopping). Anyone may ask, so the answer never carries the database driver's words: those go to the log.
 */
export async function sendReadiness(res: ServerResponse, deps: Deps, stopping: boolean, log: Log): Promise<void> {
  if (stopping) return sendError(res, 'not_ready', 'not ready: this instance is stopping');
  const state = await readiness(deps);
  if (!state.ready) {
    log(`not ready: ${state.reason}${state.detail ? ` (${state.detail})` : ''}`);
    return sendError(res, 'not_ready', `not ready: ${state.reason}`);
  }
  // Which engine the built-in node runs containers with ('none': its environments hold files only),
  // and whether it answers: a degraded node is information here, not unreadiness (the API serves).
  const { engine, status } = await builtinEngine(deps);
  sendJson(res, 200, { status: 'ready', checks: { database: 'ok', migrations: 'ok', engine, engineStatus: status } });
}
