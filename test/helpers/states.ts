// Waiting for an environment's state on the server's own event: its `environment` subscription
// answers the state it is in first, then each change, so a wait started late misses nothing.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const WATCH = 'subscription TestReaches($id: String!) { environment(id: $id) { state } }';

/**
 * Resolves once the instance at `url` says environment `id` is in `state` (or one of them); fails
 * when the subscription ends (the environment stopped or failed) in another state, naming it.
 */
export async function reaches(url: string, token: string, id: string, state: string | string[]): Promise<void> {
  const wanted = [state].flat();
  const ws = createClient({
    url: `${url.replace(/^http/, 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${token}` },
    retryAttempts: 0,
  });
  const seen: string[] = [];
  try {
    for await (const event of ws.iterate<{ environment: { state: string } }>({ query: WATCH, variables: { id } })) {
      if (!event.data) throw new Error(`environment ${id}: ${JSON.stringify(event.errors)}`);
      seen.push(event.data.environment.state);
      if (wanted.includes(event.data.environment.state)) return;
    }
  } finally {
    await ws.dispose();
  }
  throw new Error(`environment ${id} went ${seen.join(' → ')} and ended, never ${wanted.join(' or ')}`);
}
