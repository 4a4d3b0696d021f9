import { builder } from '../../kernel/graphql/builder';
import { perRequest } from '../../kernel/graphql/per-request';
import { EnvironmentRef } from './graphql';
import { latestUsageLoader, type Usage, usageHistory, watchUsage } from './usage';

const EnvironmentUsage = builder.objectRef<Usage>('EnvironmentUsage').implement({
  description: "One sample of an environment's usage",
  fields: (t) => ({
    cpu: t.exposeFloat('cpu', {
      nullable: true,
      description: 'CPU in use, in cores (0.5 = half a core); null when not measured (files-only environments)',
    }),
    memory: t.expose('memory', { type: 'SafeInt', nullable: true, description: 'Memory in use, bytes; null when not measured' }),
    pids: t.exposeInt('pids', { nullable: true, description: 'Processes; null when not measured' }),
    disk: t.expose('disk', { type: 'SafeInt', description: "Bytes in its share folders plus its container's writable layer" }),
    sampled: t.expose('sampled', { type: 'DateTime' }),
  }),
});

/** One loader per request: a list of environments asks for their latest samples in one query. */
const usageLoader = perRequest((ctx) => latestUsageLoader(ctx.deps));

builder.objectFields(EnvironmentRef, (t) => ({
  usage: t.field({
    type: EnvironmentUsage,
    nullable: true,
    description: 'The latest sample; null before the first',
    resolve: (env, _args, ctx) => usageLoader(ctx).load(env.id),
  }),
  usageHistory: t.field({
    type: [EnvironmentUsage],
    description: "The last hour's samples, oldest first: every sample of the last five minutes, at most one a minute before",
    resolve: (env, _args, ctx) => usageHistory(ctx.deps, env.id),
  }),
}));

builder.subscriptionField('environmentUsage', (t) =>
  t.field({
    type: EnvironmentUsage,
    description:
      "Each new sample of the environment's usage, as it is taken (members who may read the environment); completes once the environment has ended, at once when it already had",
    args: { id: t.arg.string({ required: true }) },
    subscribe: (_root, { id }, ctx) => watchUsage(ctx.deps, ctx.actor, id),
    resolve: (usage: Usage) => usage,
  }),
);
