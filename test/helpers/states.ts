// Waiting on an environment's own subscriptions instead of polling it: `environment` answers the
// state it is in first, then each change, and `execs` (after: 0) the commands recorded so far, then
// each new one; so a wait started late misses nothing.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const WATCH = 'subscription TestReaches($id: String!) { environment(id: $id) { state } }';
const EXECS = 'subscription TestRecorded($id: String!) { execs(environment: $id, after: 0) { command exitCode } }';

/**
 * Reads subscription `query` from the instance at `url` until `done` accepts a payload, and answers
 * that one; answers undefined when the subscription ends first. `seen` gets every payload.
 */
async function firstOf<T>(
  url: string,
  token: string,
  query: string,
  id: string,
  seen: T[],
  done: (data: T) => boolean,
): Promise<T | undefined> {
  const ws = createClient({
    url: `${url.replace(/^http/, 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${token}` },
    retryAttempts: 0,
  });
  try {
    for await (const event of ws.iterate<T>({ query, variables: { id } })) {
      if (!event.data) throw new Error(`environment ${id}: ${JSON.stringify(event.errors)}`);
      seen.push(event.data);
      if (done(event.data)) return event.data;
    }
    return undefined;
  } finally {
    await ws.dispose();
  }
}

/**
 * Resolves once the instance at `url` says environment `id` is in `state` (or one of them), with
 * the environment as its GET shows it then; fails when the subscription ends (the environment
 * stopped or failed) in another state, naming it.
 */
export async function reaches(url: string, token: string, id: string, state: string | string[]): Promise<Record<string, any>> {
  const wanted = [state].flat();
  const seen: { environment: { state: string } }[] = [];
  if (await firstOf(url, token, WATCH, id, seen, (data) => wanted.includes(data.environment.state))) {
    const res = await fetch(`${url}/v1/environments/${id}`, { headers: { authorization: `Bearer ${token}` } });
    return res.json();
  }
  throw new Error(`environment ${id} went ${seen.map((d) => d.environment.state).join(' → ')} and ended, never ${wanted.join(' or ')}`);
}

/** The first command recorded for environment `id` whose command line contains `command` (the test's time-out bounds the wait). */
export async function recorded(url: string, token: string, id: string, command: string): Promise<{ command: string; exitCode: number }> {
  const found = await firstOf<{ execs: { command: string; exitCode: number } }>(url, token, EXECS, id, [], (data) =>
    data.execs.command.includes(command),
  );
  if (!found) throw new Error(`environment ${id} ended before it recorded ${command}`);
  return found.execs;
}
