import { builder } from '../../kernel/graphql/builder';
import { EnvironmentRef } from './graphql';
import { environmentLogText, type LogPart, watchEnvironmentLog } from './log';

const EnvironmentLogPart = builder.objectRef<LogPart>('EnvironmentLogPart').implement({
  description: "A part of an environment's log, followed: its text goes on from where the part before ended",
  fields: (t) => ({
    text: t.exposeString('text', { description: 'The text, header lines included (`==> postCreateCommand (time)`)' }),
    cursor: t.exposeString('cursor', { description: 'Pass as `after` to follow on from here (after a dropped connection)' }),
  }),
});

builder.objectFields(EnvironmentRef, (t) => ({
  log: t.string({
    description:
      "What its lifecycle commands printed: each command's lines under a header naming it, with the time (`==> postCreateCommand (2026-11-29T22:40:01.123Z)`); at most 1 MiB of text, kept for 7 days after its end",
    resolve: (env, _args, ctx) => environmentLogText(ctx.deps, env.id),
  }),
}));

builder.subscriptionField('environmentLog', (t) =>
  t.field({
    type: EnvironmentLogPart,
    description:
      "An environment's log (by id or name): what it holds (always a first part, empty when it holds nothing), then what its lifecycle commands print as they print it; completes once the environment has ended",
    args: {
      id: t.arg.string({ required: true }),
      after: t.arg.string({ description: 'The cursor of the last part the caller has: only what came since' }),
    },
    subscribe: (_root, { id, after }, ctx) => watchEnvironmentLog(ctx.deps, ctx.actor, id, after),
    resolve: (part: LogPart) => part,
  }),
);
