// Live data without polling: subscriptions over graphql-ws, and queries re-run when an event says
// what they show has changed.
import type { AnyVariables, CombinedError, TypedDocumentNode } from '@urql/core';
import { useEffect, useRef, useState } from 'react';
import { useClient } from 'urql';
import { isEnded, isLive } from '../../src/kernel/environment-states';
import { graphql } from './generated/gql';
import type { EnvironmentFilter } from './generated/gql/graphql';
import { useSession } from './session';

export interface EventOptions {
  /** Not yet (e.g. until a query gave the subscription's variables). */
  pause?: boolean;
  /** Reads again what the page shows, after the WebSocket came back from a drop. */
  resync?: () => void;
}

/**
 * Calls `onEvent` with every event of a subscription while the component is mounted (unless
 * paused); answers the error that ended it, if one did.
 */
export function useEvents<Data, Variables extends AnyVariables>(
  query: TypedDocumentNode<Data, Variables>,
  variables: Variables,
  onEvent: (data: Data) => void,
  { pause = false, resync }: EventOptions = {},
): CombinedError | undefined {
  const client = useClient();
  const { api } = useSession();
  const handler = useRef(onEvent);
  handler.current = onEvent;
  const resyncRef = useRef(resync);
  resyncRef.current = resync;
  const [error, setError] = useState<CombinedError>();
  useEffect(() => api.onReconnected(() => resyncRef.current?.()), [api]);
  const key = JSON.stringify(variables);
  // biome-ignore lint/correctness/useExhaustiveDependencies: `key` stands for `variables`
  useEffect(() => {
    if (pause) return;
    setError(undefined);
    const { unsubscribe } = client.subscription(query, variables).subscribe((result) => {
      if (result.data) handler.current(result.data);
      if (result.error) setError(result.error);
    });
    return unsubscribe;
  }, [client, query, key, pause]);
  return error;
}

const EnvironmentChanges = graphql(`
  subscription EnvironmentChanges {
    environments { id state sandbox template node }
  }
`);

/**
 * Calls `refresh` after environments change (e.g. to read counts of live environments again).
 * Changes arriving together cause one refresh.
 */
export function useOnEnvironmentChange(
  refresh: () => void,
  relevant: (env: { sandbox?: string | null; template: string; node?: string | null }) => boolean = () => true,
): CombinedError | undefined {
  const pending = useRef(false);
  const latest = useRef(refresh);
  latest.current = refresh;
  return useEvents(
    EnvironmentChanges,
    {},
    (data) => {
      if (!relevant(data.environments) || pending.current) return;
      pending.current = true;
      queueMicrotask(() => {
        pending.current = false;
        latest.current();
      });
    },
    { resync: refresh },
  );
}

/** Whether an environment matches a list filter, as the server's filter decides it. */
export function matchesFilter(
  filter: EnvironmentFilter,
  env: { state: string; template: string; labels: Record<string, unknown> },
): boolean {
  const state = filter.state;
  if (state === 'live' && !isLive(env.state)) return false;
  if (state === 'ended' && !isEnded(env.state)) return false;
  if (state && state !== 'live' && state !== 'ended' && env.state !== state) return false;
  if (filter.template && env.template !== filter.template) return false;
  return (filter.label ?? []).every((pair) => {
    const eq = pair.indexOf('=');
    const value = env.labels[pair.slice(0, eq)];
    return value !== undefined && String(value) === pair.slice(eq + 1);
  });
}
