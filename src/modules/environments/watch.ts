// The environment subscriptions (docs/environments.md, "Watching instead of polling"). Both join
// the organization's feed before they return, so a subscriber gets everything committed after
// its subscribe call was answered.
import type { Actor, Deps } from '../../app/context';
import type { Environment } from '../../generated/prisma/client';
import { requireMember } from '../../kernel/access';
import { Channel } from '../../kernel/channel';
import { isEnded as isEndedState } from '../../kernel/environment-states';
import { SharedSource } from '../../kernel/shared-source';
import { type FeedEvent, joinEnvironmentFeed } from './feed';
import { type EnvironmentFilterInput, environmentFilter } from './filter';
import { findEnvironment } from './service';

const isEnded = (env: Environment) => isEndedState(env.state);

/**
 * One environment: as it is now, then every new version; the stream ends after it stopped or
 * failed. Listening starts before the first read and versions only grow, so nothing committed in
 * between is lost or sent twice.
 */
export async function watchEnvironment(deps: Deps, actor: Actor, idOrName: string): Promise<AsyncIterable<Environment>> {
  requireMember(actor);
  let leave: () => void = () => undefined;
  const channel = new Channel<Environment>(() => leave());
  let sent = 0;
  const send = (env: Environment) => {
    if (env.version <= sent) return;
    sent = env.version;
    channel.push(env);
    if (isEnded(env)) channel.end();
  };
  // Until the read below names the environment, its organization's events wait here.
  let waiting: FeedEvent[] | undefined = [];
  let id: string | undefined;
  leave = await joinEnvironmentFeed(deps, actor.orgId, (events) => {
    if (waiting) waiting.push(...events);
    else for (const { environmentId, environment } of events) if (environmentId === id) send(environment);
  });
  try {
    // Read once listening: it is the first version sent, and says who may watch it.
    const current = await findEnvironment(deps, actor, idOrName);
    id = current.id;
    send(current);
    for (const { environmentId, environment } of waiting) if (environmentId === id) send(environment);
    waiting = undefined;
  } catch (error) {
    channel.end();
    throw error;
  }
  return channel;
}

/** Every change of the organization's environments that match the filter, from now on. */
export async function watchEnvironments(deps: Deps, actor: Actor, input: EnvironmentFilterInput): Promise<AsyncIterable<Environment>> {
  requireMember(actor);
  const filter = await environmentFilter(deps, actor, input);
  let leave: () => void = () => undefined;
  const channel = new Channel<Environment>(() => leave());
  leave = await joinEnvironmentFeed(deps, actor.orgId, (events) => {
    for (const { environment } of events) if (filter.matches(environment)) channel.push(environment);
  });
  return channel;
}

/**
 * The same stream as `watchEnvironments`, as a source that every subscriber with the same
 * organization and the same resolved filter shares (GraphQL subscriptions, src/edges/graphql/fanout.ts).
 */
export async function shareEnvironments(deps: Deps, actor: Actor, input: EnvironmentFilterInput): Promise<SharedSource<Environment>> {
  requireMember(actor);
  const filter = await environmentFilter(deps, actor, input);
  return new SharedSource(`environments ${filter.key}`, (emit) =>
    joinEnvironmentFeed(deps, actor.orgId, (events) => {
      const matching: Environment[] = [];
      for (const { environment } of events) if (filter.matches(environment)) matching.push(environment);
      if (matching.length > 0) emit(matching);
    }),
  );
}
